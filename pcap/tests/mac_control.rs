//! PAUSE and PFC frames (MAC Control, EtherType 0x8808) in `roce decode`: printed beside the
//! RoCE packets (they are what a lossless RoCE fabric runs on), counted, and decoded as
//! tshark decodes them (`macc.*`): opcode, class-enable vector and the eight pause times, or
//! the PAUSE time; with VLAN tags too; a malformed one stays a skipped frame.
use roce_pcap::{decode_bytes, Options, OutputFormat};
use std::process::Command;

fn frame(tagged: bool, body: &[u8]) -> Vec<u8> {
    let mut f = vec![
        0x01, 0x80, 0xc2, 0x00, 0x00, 0x01, 0x02, 0x11, 0x22, 0x33, 0x44, 0x55,
    ];
    if tagged {
        f.extend_from_slice(&[0x81, 0x00, 0x60, 0x03]);
    }
    f.extend_from_slice(&[0x88, 0x08]);
    f.extend_from_slice(body);
    f.resize(f.len().max(60), 0);
    f
}

fn pfc(enable: u16, quanta: [u16; 8]) -> Vec<u8> {
    let mut b = vec![0x01, 0x01];
    b.extend_from_slice(&enable.to_be_bytes());
    for q in quanta {
        b.extend_from_slice(&q.to_be_bytes());
    }
    b
}

fn pcap(frames: &[Vec<u8>]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut w = roce_pcap::PcapWriter::new(&mut out, 1, false, 65535).unwrap();
    for (i, f) in frames.iter().enumerate() {
        let ts = roce_pcap::Timestamp {
            secs: 1_700_000_000,
            nanos: i as u32 * 1000,
        };
        w.write_packet(ts, f, f.len() as u32).unwrap();
    }
    w.flush().unwrap();
    out
}

#[test]
fn pause_and_pfc_frames_decode_as_tshark_decodes_them() {
    let frames = vec![
        frame(false, &pfc(0x08, [0, 0, 0, 0xffff, 0, 0, 0, 0])),
        frame(false, &[0x00, 0x01, 0x00, 0x64]),
        frame(true, &pfc(0x81, [5, 0, 0, 0, 0, 0, 0, 7])),
        frame(false, &pfc(0xff, [1, 2, 3, 4, 5, 6, 7, 8])),
        // A vector beyond priority 7: not a PFC frame this decoder shows.
        frame(false, &pfc(0x100, [0; 8])),
    ];
    let bytes = pcap(&frames);
    let (out, outcome) = decode_bytes(
        &bytes,
        "pfc",
        Options {
            format: OutputFormat::Json,
            ..Default::default()
        },
    );
    assert_eq!(outcome.stats.pause_frames, 4);
    assert_eq!(outcome.stats.skipped, 5);
    let ours: Vec<serde_json::Value> = String::from_utf8(out)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(ours.len(), 4);
    let path = std::env::temp_dir().join(format!("roce-pfc-{}.pcap", std::process::id()));
    std::fs::write(&path, &bytes).unwrap();
    let t = Command::new("tshark")
        .arg("-r")
        .arg(&path)
        .args([
            "-T",
            "fields",
            "-E",
            "separator=/t",
            "-e",
            "frame.number",
            "-e",
            "macc.opcode",
        ])
        .args(["-e", "macc.cbfc.enbv", "-e", "macc.pause_time"])
        .args((0..8).flat_map(|c| ["-e".to_string(), format!("macc.cbfc.pause_time.c{c}")]))
        .output()
        .expect("tshark (CI installs it)");
    let _ = std::fs::remove_file(&path);
    let text = String::from_utf8_lossy(&t.stdout);
    for (line, o) in text.lines().zip(&ours) {
        let c: Vec<&str> = line.split('\t').collect();
        assert_eq!(c[0], o["frame"].to_string());
        let num = |s: &str| {
            s.strip_prefix("0x").map_or_else(
                || s.parse::<u64>().unwrap(),
                |h| u64::from_str_radix(h, 16).unwrap(),
            )
        };
        let m = &o["mac_control"];
        assert_eq!(num(c[1]), m["opcode"].as_u64().unwrap(), "{line}");
        if m["name"] == "PFC" {
            assert_eq!(num(c[2]), m["class_enable"].as_u64().unwrap(), "{line}");
            for k in 0..8 {
                assert_eq!(num(c[4 + k]), m["quanta"][k].as_u64().unwrap(), "{line}");
            }
        } else {
            assert_eq!(m["name"], "PAUSE");
            assert_eq!(num(c[3]), m["quanta"].as_u64().unwrap(), "{line}");
        }
    }
    // The summary names the priorities paused and their times.
    let (out, _) = decode_bytes(&pcap(&frames[..1]), "pfc", Options::default());
    let s = String::from_utf8(out).unwrap();
    assert!(
        s.contains("PFC src=02:11:22:33:44:55 prio 3=65535 quanta"),
        "{s}"
    );
}
