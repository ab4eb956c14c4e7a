//! TensorBoard's event files, written without TensorFlow: each event is a TFRecord (length,
//! masked CRC-32C of the length, the bytes, masked CRC-32C of the bytes) holding an `Event`
//! protocol buffer (`tensorflow/core/util/event.proto`) encoded by hand. An event file starts
//! with its `file_version` event; a run's scalars are `simple_value`s and its configuration a
//! text summary (the text plugin's tensor of one string).
//!
//! Each event's `wall_time` is the run's simulated clock in seconds, so that the file is as
//! reproducible as the run (TensorBoard's "relative" axis is then simulated time). This room
//! encodes bytes; it must not open files (the tracker does, through `crate::io`).

/// An event file's name: TensorBoard reads files whose names hold `tfevents`; `n` keeps two
/// writers of one folder apart.
pub fn event_file_name(n: u32) -> String {
    format!("events.out.tfevents.{n:010}.fedsim")
}

/// The first event of every event file.
pub fn file_version() -> Vec<u8> {
    let mut event = Vec::new();
    put_double(&mut event, 1, 0.0);
    put_bytes(&mut event, 3, b"brain.Event:2");
    record(&event)
}

/// Scalars `(tag, value)` at `step`, as one event.
pub fn scalars(wall_time: f64, step: u64, values: &[(String, f64)]) -> Vec<u8> {
    let mut summary = Vec::new();
    for (tag, value) in values {
        let mut v = Vec::new();
        put_bytes(&mut v, 1, tag.as_bytes());
        put_fixed32(&mut v, 2, (*value as f32).to_bits());
        put_bytes(&mut summary, 1, &v);
    }
    event(wall_time, step, &summary)
}

/// A text summary (Markdown, as TensorBoard's text plugin shows it) under `tag` at `step`.
pub fn text(wall_time: f64, step: u64, tag: &str, markdown: &str) -> Vec<u8> {
    let mut plugin = Vec::new();
    put_bytes(&mut plugin, 1, b"text");
    let mut metadata = Vec::new();
    put_bytes(&mut metadata, 1, &plugin);
    let mut tensor = Vec::new();
    put_varint_field(&mut tensor, 1, 7); // dtype: DT_STRING
    put_bytes(&mut tensor, 2, &[]); // tensor_shape: a scalar
    put_bytes(&mut tensor, 8, markdown.as_bytes()); // string_val
    let mut value = Vec::new();
    put_bytes(&mut value, 1, tag.as_bytes());
    put_bytes(&mut value, 8, &tensor);
    put_bytes(&mut value, 9, &metadata);
    let mut summary = Vec::new();
    put_bytes(&mut summary, 1, &value);
    event(wall_time, step, &summary)
}

fn event(wall_time: f64, step: u64, summary: &[u8]) -> Vec<u8> {
    let mut event = Vec::new();
    put_double(&mut event, 1, wall_time);
    put_varint_field(&mut event, 2, step);
    put_bytes(&mut event, 5, summary);
    record(&event)
}

/// `data` framed as a TFRecord.
fn record(data: &[u8]) -> Vec<u8> {
    let length = (data.len() as u64).to_le_bytes();
    let mut out = Vec::with_capacity(data.len() + 16);
    out.extend_from_slice(&length);
    out.extend_from_slice(&masked_crc(&length).to_le_bytes());
    out.extend_from_slice(data);
    out.extend_from_slice(&masked_crc(data).to_le_bytes());
    out
}

fn masked_crc(data: &[u8]) -> u32 {
    let crc = crc32c(data);
    (crc.rotate_right(15)).wrapping_add(0xa282_ead8)
}

/// CRC-32C (Castagnoli), as TFRecord checks its frames.
fn crc32c(data: &[u8]) -> u32 {
    const POLY: u32 = 0x82f6_3b78; // reflected
    let mut crc = !0u32;
    for &byte in data {
        crc ^= byte as u32;
        for _ in 0..8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ POLY
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn put_key(out: &mut Vec<u8>, field: u64, wire: u64) {
    put_varint(out, (field << 3) | wire);
}

fn put_varint_field(out: &mut Vec<u8>, field: u64, v: u64) {
    put_key(out, field, 0);
    put_varint(out, v);
}

fn put_double(out: &mut Vec<u8>, field: u64, v: f64) {
    put_key(out, field, 1);
    out.extend_from_slice(&v.to_le_bytes());
}

fn put_fixed32(out: &mut Vec<u8>, field: u64, bits: u32) {
    put_key(out, field, 5);
    out.extend_from_slice(&bits.to_le_bytes());
}

fn put_bytes(out: &mut Vec<u8>, field: u64, bytes: &[u8]) {
    put_key(out, field, 2);
    put_varint(out, bytes.len() as u64);
    out.extend_from_slice(bytes);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The CRC's check value (RFC 3720's test vector) and TFRecord's framing.
    #[test]
    fn frames_are_tfrecords_with_crc32c() {
        assert_eq!(crc32c(b"123456789"), 0xe306_9283);
        assert_eq!(crc32c(b""), 0);
        let framed = record(b"abc");
        assert_eq!(&framed[..8], &3u64.to_le_bytes());
        assert_eq!(&framed[12..15], b"abc");
        assert_eq!(framed.len(), 8 + 4 + 3 + 4);
        assert_eq!(
            u32::from_le_bytes(framed[15..].try_into().unwrap()),
            crc32c(b"abc").rotate_right(15).wrapping_add(0xa282_ead8)
        );
    }

    /// One scalar, worked by hand: Event{wall_time 1.5, step 300, summary{value{tag "a",
    /// simple_value 0.5}}}.
    #[test]
    fn a_scalar_event_is_the_protocol_buffer_worked_by_hand() {
        let framed = scalars(1.5, 300, &[("a".to_string(), 0.5)]);
        let event = &framed[12..framed.len() - 4];
        let mut want = vec![0x09];
        want.extend_from_slice(&1.5f64.to_le_bytes());
        want.extend_from_slice(&[0x10, 0xac, 0x02]); // step 300 as a varint
        want.extend_from_slice(&[0x2a, 10, 0x0a, 8, 0x0a, 1, b'a', 0x15]);
        want.extend_from_slice(&0.5f32.to_le_bytes());
        assert_eq!(event, &want[..]);
    }
}
