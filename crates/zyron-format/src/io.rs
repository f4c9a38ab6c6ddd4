//! Bounds-checked little-endian reading and writing of the primitives SPEC.md uses.
//!
//! Every read checks the remaining length first, so hostile input becomes an error, not a panic.

use crate::error::{Result, corrupt};

/// Appends primitives to a byte vector.
#[derive(Default)]
pub(crate) struct ByteWriter {
    pub buf: Vec<u8>,
}

impl ByteWriter {
    pub fn u8(&mut self, v: u8) {
        self.buf.push(v);
    }
    pub fn u16(&mut self, v: u16) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }
    pub fn u32(&mut self, v: u32) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }
    pub fn u64(&mut self, v: u64) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }
    pub fn f64(&mut self, v: f64) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }
    /// Unsigned LEB128.
    pub fn uvarint(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.buf.push((v as u8) | 0x80);
            v >>= 7;
        }
        self.buf.push(v as u8);
    }
    /// Unsigned LEB128 of a 128-bit value (at most 19 bytes).
    pub fn uvarint128(&mut self, mut v: u128) {
        while v >= 0x80 {
            self.buf.push((v as u8) | 0x80);
            v >>= 7;
        }
        self.buf.push(v as u8);
    }
    /// A uvarint length followed by the bytes.
    pub fn bytes(&mut self, b: &[u8]) {
        self.uvarint(b.len() as u64);
        self.buf.extend_from_slice(b);
    }
}

/// Reads primitives from a byte slice, failing cleanly at its end.
#[derive(Clone, Copy)]
pub(crate) struct ByteReader<'a> {
    data: &'a [u8],
    /// What is being read, for error messages.
    what: &'static str,
}

impl<'a> ByteReader<'a> {
    pub fn new(data: &'a [u8], what: &'static str) -> Self {
        Self { data, what }
    }
    pub fn remaining(&self) -> usize {
        self.data.len()
    }
    pub fn rest(&self) -> &'a [u8] {
        self.data
    }
    pub fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        if n > self.data.len() {
            return corrupt(format!(
                "{} ends early: needs {n} bytes, has {}",
                self.what,
                self.data.len()
            ));
        }
        let (head, tail) = self.data.split_at(n);
        self.data = tail;
        Ok(head)
    }
    fn array<const N: usize>(&mut self) -> Result<[u8; N]> {
        Ok(self.take(N)?.try_into().expect("take returned N bytes"))
    }
    pub fn u8(&mut self) -> Result<u8> {
        Ok(self.array::<1>()?[0])
    }
    pub fn u16(&mut self) -> Result<u16> {
        Ok(u16::from_le_bytes(self.array()?))
    }
    pub fn u32(&mut self) -> Result<u32> {
        Ok(u32::from_le_bytes(self.array()?))
    }
    pub fn u64(&mut self) -> Result<u64> {
        Ok(u64::from_le_bytes(self.array()?))
    }
    pub fn f64(&mut self) -> Result<f64> {
        Ok(f64::from_le_bytes(self.array()?))
    }
    pub fn uvarint(&mut self) -> Result<u64> {
        let mut value = 0u64;
        for shift in (0..64).step_by(7) {
            let byte = self.u8()?;
            value |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
        corrupt(format!("{}: varint longer than 10 bytes", self.what))
    }
    pub fn uvarint128(&mut self) -> Result<u128> {
        let mut value = 0u128;
        for shift in (0..128).step_by(7) {
            let byte = self.u8()?;
            value |= u128::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
        corrupt(format!(
            "{}: 128-bit varint longer than 19 bytes",
            self.what
        ))
    }
    /// A uvarint that must not exceed `max` (a count or length that sizes an allocation).
    pub fn uvarint_max(&mut self, max: u64, field: &str) -> Result<usize> {
        let v = self.uvarint()?;
        if v > max {
            return corrupt(format!(
                "{}: {field} = {v} exceeds the limit {max}",
                self.what
            ));
        }
        Ok(v as usize)
    }
    pub fn bytes(&mut self) -> Result<&'a [u8]> {
        let n = self.uvarint_max(self.data.len() as u64, "length")?;
        self.take(n)
    }
    pub fn string(&mut self) -> Result<String> {
        let b = self.bytes()?;
        match std::str::from_utf8(b) {
            Ok(s) => Ok(s.to_string()),
            Err(_) => corrupt(format!("{}: a name is not UTF-8", self.what)),
        }
    }
}

/// Every block, column record and the footer carry Zyron's one on-disk checksum.
pub use zyron_common::checksum::{checksum32, checksum64};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_round_trip_and_reject_overlong() {
        let mut w = ByteWriter::default();
        for v in [0u64, 1, 127, 128, 300, u32::MAX as u64, u64::MAX] {
            w.uvarint(v);
        }
        let mut r = ByteReader::new(&w.buf, "test");
        for v in [0u64, 1, 127, 128, 300, u32::MAX as u64, u64::MAX] {
            assert_eq!(r.uvarint().unwrap(), v);
        }
        assert!(r.u8().is_err(), "reading past the end must fail");
        let overlong = [0xffu8; 11];
        assert!(ByteReader::new(&overlong, "test").uvarint().is_err());
    }
}
