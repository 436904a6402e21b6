#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| roce_proto::fuzzing::uet(data));
