//! What the CM's numeric fields mean: path MTU and timeout codes (§12.6, §14.2.5.6), REJ
//! reasons (Table 112), SIDR and APR statuses, transport services and rates, by name.

/// The path MTU in bytes of an MTU code (IBTA Vol 1 §14.2.5.6: 1 = 256 … 5 = 4096).
pub const fn path_mtu_bytes(code: u8) -> Option<u32> {
    match code {
        1..=5 => Some(128 << code),
        _ => None,
    }
}

/// The MTU code of a path MTU in bytes.
pub const fn path_mtu_code(bytes: u32) -> Option<u8> {
    match bytes {
        256 => Some(1),
        512 => Some(2),
        1024 => Some(3),
        2048 => Some(4),
        4096 => Some(5),
        _ => None,
    }
}

/// A CM timeout code (response timeouts, local ACK timeout, service timeout) in nanoseconds:
/// 4.096 µs × 2^code (§12.6.5; 0 for the local ACK timeout means infinite).
pub const fn timeout_ns(code: u8) -> u64 {
    4096u64 << (code & 31)
}

/// The transport service type of a REQ.
pub const fn transport_service_name(code: u8) -> &'static str {
    match code {
        0 => "RC",
        1 => "UC",
        2 => "RD",
        _ => "extended",
    }
}

/// The name of a REJ reason (§12.6.7.2, Table 109; Linux `enum ib_cm_rej_reason`).
pub const fn rej_reason_name(code: u16) -> Option<&'static str> {
    Some(match code {
        1 => "no_qp",
        2 => "no_eec",
        3 => "no_resources",
        4 => "timeout",
        5 => "unsupported",
        6 => "invalid_comm_id",
        7 => "invalid_comm_instance",
        8 => "invalid_service_id",
        9 => "invalid_transport_type",
        10 => "stale_connection",
        11 => "rdc_not_exist",
        12 => "invalid_gid",
        13 => "invalid_lid",
        14 => "invalid_sl",
        15 => "invalid_traffic_class",
        16 => "invalid_hop_limit",
        17 => "invalid_packet_rate",
        18 => "invalid_alt_gid",
        19 => "invalid_alt_lid",
        20 => "invalid_alt_sl",
        21 => "invalid_alt_traffic_class",
        22 => "invalid_alt_hop_limit",
        23 => "invalid_alt_packet_rate",
        24 => "port_cm_redirect",
        25 => "port_redirect",
        26 => "invalid_mtu",
        27 => "insufficient_resp_resources",
        28 => "consumer_reject",
        29 => "invalid_rnr_retry",
        30 => "duplicate_local_comm_id",
        31 => "invalid_class_version",
        32 => "invalid_flow_label",
        33 => "invalid_alt_flow_label",
        35 => "vendor_option_not_supported",
        _ => return None,
    })
}

/// The name of a SIDR_REP status (§12.11.2).
pub const fn sidr_status_name(code: u8) -> Option<&'static str> {
    Some(match code {
        0 => "success",
        1 => "unsupported_service_id",
        2 => "reject",
        3 => "no_qp",
        4 => "redirect",
        5 => "unsupported_version",
        _ => return None,
    })
}

/// The name of an APR status (§12.8.2).
pub const fn apr_status_name(code: u8) -> Option<&'static str> {
    Some(match code {
        0 => "success",
        1 => "invalid_comm_id",
        2 => "unsupported",
        3 => "reject",
        4 => "redirect",
        5 => "is_current",
        6 => "invalid_qpn_eecn",
        7 => "invalid_lid",
        8 => "invalid_gid",
        9 => "invalid_flow_label",
        10 => "invalid_traffic_class",
        11 => "invalid_hop_limit",
        12 => "invalid_packet_rate",
        13 => "invalid_sl",
        _ => return None,
    })
}

/// The name of a packet-rate code (§14.2.5.6 / Linux `enum ib_rate`), e.g. `"10G"`.
pub const fn rate_name(code: u8) -> Option<&'static str> {
    Some(match code {
        0 => "port_current",
        2 => "2.5G",
        5 => "5G",
        3 => "10G",
        6 => "20G",
        4 => "30G",
        7 => "40G",
        8 => "60G",
        9 => "80G",
        10 => "120G",
        11 => "14G",
        12 => "56G",
        13 => "112G",
        14 => "168G",
        15 => "25G",
        16 => "100G",
        17 => "200G",
        18 => "300G",
        19 => "28G",
        20 => "50G",
        21 => "400G",
        22 => "600G",
        _ => return None,
    })
}
