//! Loss localisation across captures against ground truth: traffic between two hosts seen at
//! three capture points (A's host, a switch mirror, B's host), each with its own clock offset
//! and jitter, packets lost in the network between points and packets the mirror failed to
//! capture (what an oversubscribed mirror port does), generated from a seed. The two host
//! captures must find exactly the network's losses; a pair with the mirror downstream sees
//! its drops as losses (two captures cannot tell), and a pair with the mirror upstream sees
//! them downstream only. The seed is printed on failure.
use roce_pcap::analyze::{localise, localise_pair, Localisation, LocaliseOptions, MAX_LOCALISED};
use roce_pcap::synth::packet_for;
use roce_pcap::{link, PcapWriter, Timestamp};
use roce_proto::{FrameBuilder, Opcode, Psn, Qpn};

/// SplitMix64: the test's own reproducible randomness.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
    /// Uniform in [-r, r].
    fn within(&mut self, r: i64) -> i64 {
        (self.next() % (2 * r as u64 + 1)) as i64 - r
    }
}

const POINTS: usize = 3;
/// Packets each way.
const PACKETS: u32 = 1500;
/// Packets at either end of the run that are never lost (the window's edge).
const EDGE: u32 = 100;
const WINDOW_NS: u64 = 50_000;

/// What happened to the packets, per direction (0: A -> B through points 0, 1, 2; 1: B -> A
/// through 2, 1, 0).
#[derive(Default, Debug)]
struct Truth {
    /// [direction]: packets lost in the network (anywhere between A's and B's captures).
    lost: [u64; 2],
    /// [direction]: packets the mirror (point 1) failed to capture.
    mirror_dropped: [u64; 2],
    /// [direction][point x][point y]: packets in capture x and not in y.
    only: [[[u64; POINTS]; POINTS]; 2],
    offsets: [i64; POINTS],
}

fn frame(from_a: bool, psn: u32, resend_tag: u8) -> Vec<u8> {
    let (src, dst, qp) = if from_a {
        ([10, 0, 0, 1], [10, 0, 0, 2], 0x22)
    } else {
        ([10, 0, 0, 2], [10, 0, 0, 1], 0x11)
    };
    let op = if from_a {
        Opcode::RC_SEND_ONLY
    } else {
        Opcode::RC_ACKNOWLEDGE
    };
    let payload = [resend_tag; 64];
    let mut p = packet_for(op, 0, if from_a { &payload[..] } else { &[] });
    p.bth.dest_qp = Qpn(qp);
    p.bth.psn = Psn::new(psn);
    let b = FrameBuilder::ipv4(src, dst, 0xc123);
    let mut buf = vec![0u8; b.frame_len(&p)];
    let n = b.build(&p, &mut buf).expect("builds");
    buf.truncate(n);
    buf
}

/// Writes the three captures of one seed into `dir`; returns their paths and the truth.
fn scenario(seed: u64, dir: &std::path::Path) -> ([String; POINTS], Truth) {
    let mut rng = Rng(seed);
    let mut truth = Truth::default();
    // Point 0's clock is the reference; the others are off by up to a second.
    for o in truth.offsets.iter_mut().skip(1) {
        *o = rng.within(1_000_000_000);
    }
    // Hop delays (ns) between consecutive points: 2 to 10 us, each packet +-500 ns jitter.
    let hop: Vec<i64> = (0..POINTS - 1)
        .map(|_| 2_000 + (rng.next() % 8_000) as i64)
        .collect();
    let (loss, drop) = (0.01 + rng.unit() * 0.02, rng.unit() * 0.01);
    let mut caps: [Vec<(i64, Vec<u8>)>; POINTS] = Default::default();
    for dirn in 0..2 {
        let order: Vec<usize> = if dirn == 0 {
            (0..POINTS).collect()
        } else {
            (0..POINTS).rev().collect()
        };
        for i in 0..PACKETS {
            let edge = i < EDGE || i + EDGE >= PACKETS;
            // PSN 700 goes twice, byte for byte (a resend), 300 packets apart.
            let psn = if i == 1000 { 700 } else { i };
            let f = frame(dirn == 0, psn, 0);
            let mut t = 1_000_000 + i64::from(i) * 1_000 + dirn as i64 * 400;
            let mut seen = [false; POINTS];
            for (h, &point) in order.iter().enumerate() {
                if h > 0 {
                    t += hop[if dirn == 0 { h - 1 } else { POINTS - 1 - h }] + rng.within(500);
                }
                if point == 1 && !edge && rng.unit() < drop {
                    truth.mirror_dropped[dirn] += 1;
                } else {
                    seen[point] = true;
                    caps[point].push((t + truth.offsets[point], f.clone()));
                }
                if h + 1 < POINTS && !edge && rng.unit() < loss {
                    truth.lost[dirn] += 1;
                    break;
                }
            }
            for x in 0..POINTS {
                for y in 0..POINTS {
                    truth.only[dirn][x][y] += u64::from(seen[x] && !seen[y]);
                }
            }
        }
    }
    let paths = std::array::from_fn(|p| {
        let path = dir.join(format!("point{p}.pcap"));
        let mut frames = std::mem::take(&mut caps[p]);
        frames.sort_by_key(|f| f.0);
        let file = std::fs::File::create(&path).unwrap();
        let mut w =
            PcapWriter::new(std::io::BufWriter::new(file), link::ETHERNET, true, 65535).unwrap();
        for (t, f) in &frames {
            let t = t + 1_800_000_000_000_000_000;
            let ts = Timestamp {
                secs: t / 1_000_000_000,
                nanos: (t % 1_000_000_000) as u32,
            };
            w.write_packet(ts, f, f.len() as u32).unwrap();
        }
        w.flush().unwrap();
        path.to_str().unwrap().to_string()
    });
    (paths, truth)
}

fn direction(ls: &[Localisation], from_a: bool) -> &Localisation {
    let src = if from_a { "10.0.0.1" } else { "10.0.0.2" };
    ls.iter()
        .find(|l| l.src.to_string() == src)
        .unwrap_or_else(|| panic!("no direction from {src}: {ls:?}"))
}

#[test]
fn every_missing_packet_is_placed_between_the_right_capture_points() {
    let dir = std::env::temp_dir().join(format!("roce-localise-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let opts = LocaliseOptions {
        window_ns: WINDOW_NS,
    };
    for seed in 1..=120u64 {
        let (paths, truth) = scenario(seed, &dir);
        let ctx = format!("seed {seed}: {truth:?}");
        for (x, y) in [(0, 1), (1, 2), (0, 2)] {
            let ls = localise_pair(&paths[x], &paths[y], opts).unwrap();
            assert_eq!(ls.len(), 2, "{ctx}: {ls:?}");
            for dirn in 0..2 {
                let l = direction(&ls, dirn == 0);
                // Path order: A -> B passes 0, 1, 2; B -> A passes 2, 1, 0.
                let (up, down) = if dirn == 0 { (x, y) } else { (y, x) };
                assert_eq!(l.from, paths[up], "{ctx}: upstream of direction {dirn}");
                assert_eq!(l.to, paths[down], "{ctx}");
                let at = format!("{ctx}: {x}-{y} dir {dirn}: {l:?}");
                assert_eq!(l.lost_between, truth.only[dirn][up][down], "{at}");
                assert_eq!(l.only_downstream, truth.only[dirn][down][up], "{at}");
                match (up, down) {
                    // The hosts' captures: the network's losses exactly, nothing else.
                    (0, 2) | (2, 0) => {
                        assert_eq!(l.lost_between, truth.lost[dirn], "{at}");
                        assert_eq!(l.only_downstream, 0, "{at}");
                    }
                    // The mirror upstream: its drops (those the network did not lose after)
                    // show downstream only.
                    (1, _) => assert!(l.only_downstream <= truth.mirror_dropped[dirn], "{at}"),
                    _ => assert_eq!(l.only_downstream, 0, "{at}"),
                }
                let offset = truth.offsets[down] - truth.offsets[up];
                assert!(
                    (l.clock_offset_ns - offset).abs() < 1_000,
                    "{ctx}: offset {} want {offset}",
                    l.clock_offset_ns
                );
                assert!(
                    l.delay_ns.0 > 0 && l.delay_ns.1 >= l.delay_ns.0,
                    "{ctx}: {l:?}"
                );
                assert!(!l.offset_one_way);
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn one_direction_only_says_its_offset_holds_the_delay_and_localise_takes_every_pair() {
    let dir = std::env::temp_dir().join(format!("roce-localise1-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // Two captures of A's packets only, the second 3 us later on a clock 5 ms ahead, and
    // packets 500 and 900 lost between.
    let mut paths = Vec::new();
    for p in 0..2i64 {
        let path = dir.join(format!("one{p}.pcap"));
        let file = std::fs::File::create(&path).unwrap();
        let mut w =
            PcapWriter::new(std::io::BufWriter::new(file), link::ETHERNET, true, 65535).unwrap();
        for i in 0..2000u32 {
            if p == 1 && (i == 500 || i == 900) {
                continue;
            }
            let t = 1_000_000_000 + i64::from(i) * 1_000 + p * (3_000 + 5_000_000);
            let ts = Timestamp {
                secs: 1_800_000_000 + t / 1_000_000_000,
                nanos: (t % 1_000_000_000) as u32,
            };
            let f = frame(true, i, 0);
            w.write_packet(ts, &f, f.len() as u32).unwrap();
        }
        w.flush().unwrap();
        paths.push(path.to_str().unwrap().to_string());
    }
    let refs: Vec<&str> = paths.iter().map(String::as_str).collect();
    let ls = localise(
        &refs,
        LocaliseOptions {
            window_ns: WINDOW_NS,
        },
    )
    .unwrap();
    assert_eq!(ls.len(), 1, "{ls:?}");
    let l = &ls[0];
    assert!(l.offset_one_way);
    assert_eq!((l.matched, l.lost_between, l.only_downstream), (1998, 2, 0));
    assert_eq!(
        l.frames,
        [501, 901],
        "frame numbers in the upstream capture"
    );
    assert_eq!(l.clock_offset_ns, 5_003_000, "offset and delay together");
    // The reports show it: a text paragraph, a JSON line, an HTML table and a ladder with
    // the two lost packets.
    let mut an = roce_pcap::analyze::analyze_path(&paths[0], Default::default()).unwrap();
    an.localised = ls.clone();
    let text = roce_pcap::analyze::text(&an, false);
    assert!(
        text.contains("loss localisation 10.0.0.1 -> 10.0.0.2"),
        "{text}"
    );
    assert!(text.contains("lost: frames 501, 901 of"), "{text}");
    let json = roce_pcap::analyze::json_lines(&an, false);
    let line: serde_json::Value = json
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .find(|v| v["type"] == "loss_localisation")
        .expect("a loss_localisation line");
    assert_eq!(line["frames"], serde_json::json!([501, 901]));
    assert_eq!(line["lost_between"], 2);
    let mut html = Vec::new();
    roce_pcap::analyze::write_html(&an, &mut html).unwrap();
    let html = String::from_utf8(html).unwrap();
    assert!(html.contains("<h2>Loss localisation</h2>"));
    assert_eq!(
        html.matches("&#10005;").count(),
        2,
        "one cross per lost packet"
    );
    assert!(html.contains("frame 501, ") && html.contains("frame 901, "));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_capture_naming_more_directions_than_followed_is_bounded_and_says_so() {
    let dir = std::env::temp_dir().join(format!("roce-localise2-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let n = MAX_LOCALISED as u32 + 1000;
    let mut paths = Vec::new();
    for p in 0..2i64 {
        let path = dir.join(format!("many{p}.pcap"));
        let file = std::fs::File::create(&path).unwrap();
        let mut w =
            PcapWriter::new(std::io::BufWriter::new(file), link::ETHERNET, true, 65535).unwrap();
        for i in 0..n {
            // Every packet from another sender: a direction each.
            let b = FrameBuilder::ipv4((0x0a00_0000 + i).to_be_bytes(), [10, 255, 0, 1], 0xc123);
            let mut pk = packet_for(Opcode::RC_SEND_ONLY, 0, &[1; 8]);
            pk.bth.dest_qp = Qpn(0x22);
            let mut f = vec![0u8; b.frame_len(&pk)];
            let len = b.build(&pk, &mut f).unwrap();
            let t = i64::from(i) * 1_000 + p * 2_000;
            let ts = Timestamp {
                secs: 1_800_000_000 + t / 1_000_000_000,
                nanos: (t % 1_000_000_000) as u32,
            };
            w.write_packet(ts, &f[..len], len as u32).unwrap();
        }
        w.flush().unwrap();
        paths.push(path.to_str().unwrap().to_string());
    }
    let ls = localise_pair(&paths[0], &paths[1], LocaliseOptions::default()).unwrap();
    assert_eq!(ls.len(), MAX_LOCALISED);
    assert!(ls.iter().all(|l| l.untracked == 2 * 1000), "{:?}", ls[0]);
    let _ = std::fs::remove_dir_all(&dir);
}
