//! Text helpers of the reports: numbers and padding written straight into a `String`.

/// `n` in decimal.
pub(super) fn push_u64(o: &mut String, n: u64) {
    o.push_str(itoa::Buffer::new().format(n));
}

/// Pads what was written from `at` on with spaces to `width` characters, on the right
/// (`{:<width}`; the report's texts are ASCII).
pub(super) fn pad_right(o: &mut String, at: usize, width: usize) {
    for _ in o.len() - at..width {
        o.push(' ');
    }
}
