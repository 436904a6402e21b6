//! # roce-pcap: capture files and RoCE decoding (work in progress)
#![forbid(unsafe_code)]
