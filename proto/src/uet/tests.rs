extern crate std;
use std::vec;
use std::vec::Vec;

use super::*;
use crate::Error;

fn hex(s: &str) -> Vec<u8> {
    s.split_whitespace()
        .map(|b| u8::from_str_radix(b, 16).unwrap())
        .collect()
}

/// XDP2's `parse_dump` vector: a RUD_CC request, NH standard, RETX, clear_psn_offset 0x1234,
/// PSN 0x98765432, SPDCID 0x3456, DPDCID 0x9abc, CCC 0x77, credit target 0x887766.
const RUD_CC: &str = "69 90 12 34 98 76 54 32 34 56 9a bc 77 88 77 66";

#[test]
fn the_rud_cc_request_vector() {
    let b = hex(RUD_CC);
    let r = pds::Request::parse(&b).unwrap();
    assert_eq!(r.prologue.pds_type(), PdsType::RudCcReq);
    assert_eq!(r.prologue.next_header(), NextHeader::RequestStd);
    assert!(r.prologue.retx());
    assert_eq!(r.prologue.flags(), 0x10);
    assert_eq!(
        (r.clear_psn_offset, r.psn, r.spdcid, r.dpdcid),
        (0x1234, 0x9876_5432, 0x3456, 0x9abc)
    );
    assert_eq!(r.clear_psn(), 0x9876_5432 + 0x1234);
    let cc = pds::RequestCc::parse(&b[12..]).unwrap();
    assert_eq!((cc.ccc_id, cc.credit_target), (0x77, 0x88_7766));
    assert_eq!(Prologue::new(PdsType::RudCcReq, 3, 0x10), r.prologue);
    // With its standard request after it, the whole packet round-trips.
    let mut pkt = b.clone();
    let mut std_req = [0u8; 44];
    std_req[0] = 0x01; // WRITE
    std_req[1] = 0x03; // SOM | EOM
    std_req[40..].copy_from_slice(&4096u32.to_be_bytes());
    pkt.extend_from_slice(&std_req);
    pkt.extend_from_slice(&[0xaa; 8]); // payload
    let h = Headers::parse(&pkt, false, Reading::default()).unwrap();
    assert_eq!(h.len, 60);
    let Some(Ses::RequestStd(s, None)) = h.ses else {
        panic!("{h:?}")
    };
    assert_eq!(s.common.opcode(), SesOpcode::Write);
    assert!(s.common.start_of_msg() && s.common.end_of_msg());
    assert_eq!(s.request_length, 4096);
    let mut out = vec![0u8; h.buffer_len()];
    assert_eq!(h.emit(&mut out).unwrap(), 60);
    assert_eq!(&out[..], &pkt[..60]);
}

/// One packet of every PDS type (with an SES header where one may follow), built from
/// fields, parsed back, every prefix refused.
#[test]
fn every_pds_type_round_trips_and_every_prefix_is_an_error() {
    let small = Ses::RequestSmall(
        ses::RequestSmall {
            common: ses::Common {
                byte0: 0x05,
                flags: 0x43,
                message_id: 7,
                ri_generation: 1,
                job_id: 0x12_3456,
                pid_word: 0x0abc,
                ri_word: 0x0def,
            },
            buffer_offset: 0x1000,
        },
        None,
    );
    let medium = Ses::RequestMedium(
        ses::RequestMedium {
            common: ses::Common {
                byte0: 0x09,
                ..ses::Common::default()
            },
            header_data: 1,
            initiator: 2,
            mem_key: 3,
        },
        None,
    );
    let atomic = Ses::RequestStd(
        ses::RequestStd {
            common: ses::Common {
                byte0: SesOpcode::FetchingAtomic.value(),
                flags: 0x03,
                ..ses::Common::default()
            },
            request_length: 8,
            ..ses::RequestStd::default()
        },
        Some(ses::Atomic {
            code: 0x0d, // CSWAP
            datatype: 0x07,
            cas: Some(([1; 16], [2; 16])),
            ..ses::Atomic::default()
        }),
    );
    let response = Ses::Response(ses::Response {
        common: ses::ResponseCommon {
            byte0: 0x01,
            byte1: 0x01,
            message_id: 7,
            ri_generation: 1,
            job_id: 5,
        },
        modified_length: 4096,
    });
    let rdata = Ses::ResponseData(ses::ResponseData {
        length_word: 0x3fff,
        ..ses::ResponseData::default()
    });
    let rsmall = Ses::ResponseDataSmall(ses::ResponseDataSmall {
        length_word: 16,
        original_request_psn: 9,
        ..ses::ResponseDataSmall::default()
    });
    let ack = pds::Ack {
        prologue: Prologue::new(PdsType::Ack, 4, 0x20),
        ack_psn_offset: 3,
        cack_psn: 100,
        spdcid: 1,
        dpdcid: 2,
    };
    let cases: Vec<Headers> = vec![
        Headers {
            entropy: None,
            tss: None,
            pds: Pds::Request(
                pds::Request {
                    prologue: Prologue::new(PdsType::RodReq, 1, 0x04),
                    psn: 1000,
                    dpdcid: 0x8005,
                    ..pds::Request::default()
                },
                None,
            ),
            ses: Some(small),
            len: 0,
        },
        Headers {
            entropy: Some(EntropyHeader {
                entropy: 0xbeef,
                reserved: 0,
            }),
            tss: Some(pds::Tss {
                word0: 0x0d00_0042, // TSS, SP, AN, SDI 0x42
                ssi: Some(0x1111),
                tsc: 77,
            }),
            pds: Pds::Rudi(pds::Rudi {
                prologue: Prologue::new(PdsType::RudiReq, 2, 0),
                reserved: 0,
                pkt_id: 5,
            }),
            ses: Some(medium),
            len: 0,
        },
        Headers {
            entropy: None,
            tss: Some(pds::Tss {
                word0: 0x0800_0001,
                ssi: None,
                tsc: 1,
            }),
            pds: Pds::Uud(pds::Uud {
                prologue: Prologue::new(PdsType::UudReq, 3, 0),
                reserved: 0,
            }),
            ses: Some(atomic),
            len: 0,
        },
        Headers {
            entropy: None,
            tss: None,
            pds: Pds::Ack(ack, None),
            ses: Some(response),
            len: 0,
        },
        Headers {
            entropy: None,
            tss: None,
            pds: Pds::Ack(
                pds::Ack {
                    prologue: Prologue::new(PdsType::AckCc, 5, 0),
                    ..ack
                },
                Some(pds::AckCc {
                    mpr: 8,
                    sack_psn_offset: -2,
                    sack_bitmap: 0xff,
                    cc_state: 0x0102_8304_0506_0708,
                    ..pds::AckCc::default()
                }),
            ),
            ses: Some(rdata),
            len: 0,
        },
        Headers {
            entropy: None,
            tss: None,
            pds: Pds::AckCcx(
                pds::Ack {
                    prologue: Prologue::new(PdsType::AckCcx, 6, 0),
                    ..ack
                },
                pds::Ccx::parse(&[0x30; 20], true, CcxReading::Xdp2).unwrap(),
            ),
            ses: Some(rsmall),
            len: 0,
        },
        Headers {
            entropy: None,
            tss: None,
            pds: Pds::Nack(
                pds::Nack {
                    prologue: Prologue::new(PdsType::NackCcx, 0, 0x08),
                    nack_code: NackCode::Trimmed.value(),
                    nack_psn: 42,
                    ..pds::Nack::default()
                },
                Some(pds::Ccx::parse(&[0x10; 8], false, CcxReading::Xdp2).unwrap()),
            ),
            ses: None,
            len: 0,
        },
        Headers {
            entropy: None,
            tss: None,
            pds: Pds::Control(pds::Control {
                prologue: Prologue::new(PdsType::Control, ControlType::Probe.value(), 0x08),
                probe_opaque: 0x55,
                psn: 9,
                payload: 8,
                ..pds::Control::default()
            }),
            ses: None,
            len: 0,
        },
    ];
    for mut h in cases {
        h.len = h.buffer_len();
        let mut b = vec![0u8; h.len];
        assert_eq!(h.emit(&mut b).unwrap(), h.len);
        let over_ip = h.entropy.is_some();
        let back = Headers::parse(&b, over_ip, Reading::default()).unwrap();
        assert_eq!(back, h);
        for n in 0..b.len() {
            match Headers::parse(&b[..n], over_ip, Reading::default()) {
                Err(Error::Truncated { .. }) => {}
                other => panic!(
                    "{:?} with {n} bytes: {other:?}",
                    h.pds.prologue().pds_type()
                ),
            }
        }
        assert!(h.emit(&mut vec![0u8; h.len - 1]).is_err());
    }
}

#[test]
fn field_readings() {
    let ack = pds::Ack {
        prologue: Prologue::new(PdsType::AckCc, 0, 0x20 | 0x04),
        ack_psn_offset: 0xfffe,
        cack_psn: 10,
        ..pds::Ack::default()
    };
    assert_eq!(ack.ack_psn(), Some(8));
    assert_eq!(ack.request(), 2);
    let probe = pds::Ack {
        prologue: Prologue::new(PdsType::Ack, 0, 0x08),
        ..ack
    };
    assert_eq!(probe.ack_psn(), None);
    let cc = pds::AckCc {
        cc_state: 0x0102_8304_0506_0708,
        sack_psn_offset: -1,
        ..pds::AckCc::default()
    };
    let n = cc.nscc();
    assert_eq!(
        (
            n.service_time,
            n.restore_cwnd,
            n.rcv_cwnd_pend,
            n.rcvd_bytes,
            n.ooo_count
        ),
        (0x0102, true, 0x03, 0x04_0506, 0x0708)
    );
    assert_eq!(cc.credit(), (0x01_0283, 0x0708));
    assert_eq!(cc.sack_base(0), u32::MAX);
    let syn = pds::Request {
        prologue: Prologue::new(PdsType::RudReq, 0, 0x04),
        psn: 0x1000,
        dpdcid: 0x8123,
        ..pds::Request::default()
    };
    assert!(syn.use_rsv_pdc());
    assert_eq!((syn.psn_offset(), syn.start_psn()), (0x123, 0x1000 - 0x123));
    let w = ses::ResponseData {
        length_word: 0x3fff,
        ..ses::ResponseData::default()
    };
    assert_eq!(
        (w.payload_length(true), w.payload_length(false)),
        (0x3fff, 0x0fff)
    );
    // The CCX reading decides the extension's length, and so where the SES begins.
    let mut b = vec![0u8; 40];
    Prologue::new(PdsType::AckCcx, 0, 0)
        .0
        .to_be_bytes()
        .iter()
        .enumerate()
        .for_each(|(i, x)| b[i] = *x);
    let x = Headers::parse(&b, false, Reading::default()).unwrap();
    let w = Headers::parse(
        &b,
        false,
        Reading {
            ccx: CcxReading::Wireshark,
        },
    )
    .unwrap();
    assert_eq!((x.len, w.len), (32, 40));
}

#[test]
fn unknown_types_and_next_headers_are_malformed() {
    let mut b = vec![0u8; 64];
    b[..2].copy_from_slice(&Prologue(15 << 11).0.to_be_bytes());
    assert!(matches!(
        Headers::parse(&b, false, Reading::default()),
        Err(Error::Malformed {
            layer: Layer::Pds,
            ..
        })
    ));
    b[..2].copy_from_slice(&Prologue::new(PdsType::Ack, 9, 0).0.to_be_bytes());
    assert!(matches!(
        Headers::parse(&b, false, Reading::default()),
        Err(Error::Malformed {
            layer: Layer::Ses,
            ..
        })
    ));
    // Two security headers.
    b[..2].copy_from_slice(&Prologue(1 << 11).0.to_be_bytes());
    b[12..14].copy_from_slice(&Prologue(1 << 11).0.to_be_bytes());
    assert!(Headers::parse(&b, false, Reading::default()).is_err());
}

#[test]
fn every_code_round_trips() {
    for v in 0..=255u8 {
        assert_eq!(NackCode::from_u8(v).value(), v);
        assert_eq!(PdsType::from_bits(v & 0x1f).value(), v & 0x1f);
        assert_eq!(SesOpcode::from_bits(v & 0x3f).value(), v & 0x3f);
        assert_eq!(ReturnCode::from_bits(v & 0x3f).value(), v & 0x3f);
        assert_eq!(ControlType::from_bits(v & 0xf).value(), v & 0xf);
    }
    assert_eq!(PdsType::from_bits(13).name(), Some("RUD_CC_REQ"));
    assert_eq!(NackCode::from_u8(0x0c).name(), None);
}
