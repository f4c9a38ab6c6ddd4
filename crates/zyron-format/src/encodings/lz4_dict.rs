//! LZ4 blocks that may refer back into a shared dictionary: safe wrappers over the few liblz4
//! functions (linked through `lz4-sys`) that the `lz4` crate does not wrap. A block compressed
//! with a dictionary decompresses only with the same dictionary bytes; LZ4 looks at most
//! 64 KiB back, so only the dictionary's last 64 KiB matter.

use std::os::raw::{c_char, c_int, c_void};

use crate::error::{Result, corrupt};

unsafe extern "C" {
    fn LZ4_createStreamHC() -> *mut c_void;
    fn LZ4_freeStreamHC(stream: *mut c_void) -> c_int;
    fn LZ4_resetStreamHC_fast(stream: *mut c_void, level: c_int);
    fn LZ4_loadDictHC(stream: *mut c_void, dict: *const c_char, dict_size: c_int) -> c_int;
    fn LZ4_attach_HC_dictionary(working: *mut c_void, dictionary: *const c_void);
    fn LZ4_compress_HC_continue(
        stream: *mut c_void,
        src: *const c_char,
        dst: *mut c_char,
        src_size: c_int,
        dst_capacity: c_int,
    ) -> c_int;
    fn LZ4_compressBound(input_size: c_int) -> c_int;
    fn LZ4_decompress_safe_usingDict(
        src: *const c_char,
        dst: *mut c_char,
        src_size: c_int,
        dst_capacity: c_int,
        dict: *const c_char,
        dict_size: c_int,
    ) -> c_int;
}

/// Compresses blocks in LZ4's high-compression mode against one dictionary, which is indexed
/// once and attached to each block's compression (not re-indexed per block).
pub struct HcWithDictionary<'d> {
    dictionary_stream: *mut c_void,
    working_stream: *mut c_void,
    level: i32,
    /// The indexed stream points into these bytes: they must outlive it.
    _dictionary: &'d [u8],
}

impl<'d> HcWithDictionary<'d> {
    /// `None` if liblz4 cannot allocate its state or the dictionary is over 2 GiB.
    pub fn new(dictionary: &'d [u8], level: i32) -> Option<Self> {
        let size = c_int::try_from(dictionary.len()).ok()?;
        // SAFETY: plain allocations; checked for null before use, freed in Drop.
        let (dictionary_stream, working_stream) =
            unsafe { (LZ4_createStreamHC(), LZ4_createStreamHC()) };
        let this = Self {
            dictionary_stream,
            working_stream,
            level,
            _dictionary: dictionary,
        };
        if dictionary_stream.is_null() || working_stream.is_null() {
            return None;
        }
        // SAFETY: a valid stream; `dictionary` outlives it (the lifetime on Self).
        unsafe {
            LZ4_resetStreamHC_fast(dictionary_stream, level);
            LZ4_loadDictHC(dictionary_stream, dictionary.as_ptr().cast(), size);
        }
        Some(this)
    }

    /// One LZ4 block of `src`, which may copy from the dictionary.
    pub fn compress(&self, src: &[u8]) -> Option<Vec<u8>> {
        let size = c_int::try_from(src.len()).ok()?;
        // SAFETY: pure function of its argument.
        let bound = unsafe { LZ4_compressBound(size) };
        if bound <= 0 {
            return None;
        }
        let mut dst = vec![0u8; bound as usize];
        // SAFETY: both streams are valid; `dst` has `bound` writable bytes, enough for any
        // input of `size` bytes; the attached dictionary stream and its bytes are alive.
        let written = unsafe {
            LZ4_resetStreamHC_fast(self.working_stream, self.level);
            LZ4_attach_HC_dictionary(self.working_stream, self.dictionary_stream);
            LZ4_compress_HC_continue(
                self.working_stream,
                src.as_ptr().cast(),
                dst.as_mut_ptr().cast(),
                size,
                bound,
            )
        };
        if written <= 0 {
            return None;
        }
        dst.truncate(written as usize);
        Some(dst)
    }
}

impl Drop for HcWithDictionary<'_> {
    fn drop(&mut self) {
        // SAFETY: created by LZ4_createStreamHC (freeing null is a no-op); freed once.
        unsafe {
            LZ4_freeStreamHC(self.working_stream);
            LZ4_freeStreamHC(self.dictionary_stream);
        }
    }
}

/// Decompresses `block` onto `buf` right after its first `history` bytes, which serve as the
/// dictionary: `buf` is cut to `history` bytes, then grows by exactly `len` (or the block is
/// damaged). Keeping the dictionary in the same buffer, just before the output, lets liblz4
/// use its fast prefix mode instead of its separate-dictionary mode. liblz4's safe decoder
/// never reads or writes outside the buffers it is given, whatever the input.
pub fn decompress_after(block: &[u8], buf: &mut Vec<u8>, history: usize, len: usize) -> Result<()> {
    let (Ok(src_size), Ok(dst_size), Ok(dict_size)) = (
        c_int::try_from(block.len()),
        c_int::try_from(len),
        c_int::try_from(history),
    ) else {
        return corrupt("LZ4 block over 2 GiB");
    };
    assert!(history <= buf.len(), "the history is part of the buffer");
    buf.truncate(history);
    buf.reserve(len);
    let start = buf.as_mut_ptr();
    // SAFETY: `buf` holds `history` initialised bytes followed by at least `len` bytes of
    // spare capacity; liblz4 reads the first region and writes at most `dst_size` bytes of the
    // second, returning how many (or a negative error).
    let written = unsafe {
        LZ4_decompress_safe_usingDict(
            block.as_ptr().cast(),
            start.add(history).cast(),
            src_size,
            dst_size,
            start.cast_const().cast(),
            dict_size,
        )
    };
    if written != dst_size {
        return corrupt(format!(
            "damaged LZ4 block: {written} bytes where {len} were expected"
        ));
    }
    // SAFETY: liblz4 initialised exactly `len` bytes after the history.
    unsafe { buf.set_len(history + len) };
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_round_trip_through_their_dictionary_and_fail_without_it() {
        let dictionary =
            b"carefully regular packages sleep furiously among the final deposits. ".repeat(40);
        let text =
            b"the final deposits sleep carefully; regular packages sleep furiously. ".repeat(3);
        let hc = HcWithDictionary::new(&dictionary, 9).unwrap();
        let block = hc.compress(&text).unwrap();
        assert!(
            block.len() * 3 < text.len(),
            "the dictionary must help: {} bytes",
            block.len()
        );
        let mut buf = dictionary.clone();
        buf.extend_from_slice(b"earlier output, cut away");
        decompress_after(&block, &mut buf, dictionary.len(), text.len()).unwrap();
        assert_eq!(&buf[..dictionary.len()], &dictionary[..]);
        assert_eq!(&buf[dictionary.len()..], &text[..]);
        let mut wrong = vec![b'x'; dictionary.len()];
        let decoded = decompress_after(&block, &mut wrong, dictionary.len(), text.len());
        assert!(decoded.is_err() || wrong[dictionary.len()..] != text[..]);
        for cut in [1, block.len() / 2] {
            let mut buf = dictionary.clone();
            let damaged = &block[..block.len() - cut];
            assert!(decompress_after(damaged, &mut buf, dictionary.len(), text.len()).is_err());
        }
    }
}
