//! The report as text: one table of FCT slowdowns per flow-size bucket and the fabric's
//! counters.
use super::*;

/// The report as a table.
pub fn table(r: &FctReport) -> String {
    let mut s = String::new();
    if r.topology != "switch" {
        let _ = writeln!(s, "{}", r.topology);
    }
    let _ = writeln!(
        s,
        "cc {}: {} of {} flows completed, goodput {:.2} Gb/s, mean FCT {:.1} us, {:.2} ms simulated",
        r.cc, r.completed, r.flows, r.goodput_gbps, r.mean_fct_us, r.sim_ms
    );
    let _ = writeln!(
        s,
        "drops {}, retransmitted {}, CE marked {}, CNPs {}, deepest queue {} B, PFC pauses {} ({:.1} us paused, {} PFC frames)",
        r.tail_drops,
        r.retransmitted_packets,
        r.ce_marked,
        r.cnps,
        r.max_queue_bytes,
        r.pfc_pauses,
        r.pfc_paused_us,
        r.pfc_frames
    );
    if let Some((fct, slow)) = r.victim {
        let _ = writeln!(
            s,
            "victim flow (first sender -> 10.0.0.2, not through the congested port): FCT {fct:.1} us, slowdown {slow:.2}"
        );
    }
    for l in &r.links {
        let _ = writeln!(
            s,
            "links {:<9} {:>4}: utilisation mean {:>5.1} %, min {:>5.1} %, max {:>5.1} %, cv {:.2}",
            l.tier,
            l.links,
            l.mean * 100.0,
            l.min * 100.0,
            l.max * 100.0,
            l.cv
        );
    }
    if let Some(b) = r
        .fabric_links
        .iter()
        .max_by(|a, b| a.utilisation.total_cmp(&b.utilisation))
    {
        let _ = writeln!(
            s,
            "busiest link between switches: {} -> {}, {:.1} % (its deepest queue {} B){}",
            b.from,
            b.to,
            b.utilisation * 100.0,
            b.max_queue_bytes,
            if r.repaths > 0 {
                format!("; {} path moves by the senders", r.repaths)
            } else {
                String::new()
            }
        );
    }
    if r.failed_flows > 0 {
        let _ = writeln!(
            s,
            "FAILED: {} flows' WRITEs completed with an error (retries exhausted)",
            r.failed_flows
        );
    }
    let _ = if r.mismatched_flows == 0 {
        writeln!(
            s,
            "every byte of the completed flows verified in place at the receiver ({} bytes)",
            r.verified_bytes
        )
    } else {
        writeln!(
            s,
            "MISMATCH: {} completed flows' bytes differ at the receiver",
            r.mismatched_flows
        )
    };
    let kb = |b: u64| {
        if b == u64::MAX {
            "more than 16 MB".to_string()
        } else {
            format!("{} KB", b / 1000)
        }
    };
    let _ = writeln!(
        s,
        "queue over time: mean {:.1} KB, p50 <= {}, p95 <= {}, p99 <= {}",
        r.queue.mean_bytes / 1e3,
        kb(r.queue.p50_bytes),
        kb(r.queue.p95_bytes),
        kb(r.queue.p99_bytes)
    );
    if r.postponed > 0 {
        let _ = writeln!(
            s,
            "{} flows waited to start for memory (the simulator holds at most {} MiB of flows at once); their FCTs include the wait",
            r.postponed,
            r.max_active_bytes >> 20
        );
    }
    let _ = writeln!(
        s,
        "{:<12} {:>6} {:>9} {:>9} {:>9}",
        "flow size", "flows", "p50", "p95", "p99"
    );
    for (label, b) in std::iter::once(("all".to_string(), r.all)).chain(r.buckets.iter().cloned()) {
        if b.flows == 0 {
            continue;
        }
        let _ = writeln!(
            s,
            "{:<12} {:>6} {:>9.2} {:>9.2} {:>9.2}",
            label, b.flows, b.p50, b.p95, b.p99
        );
    }
    s
}
