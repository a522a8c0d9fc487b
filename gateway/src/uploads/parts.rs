//! How an upload is cut into parts: every chunk a client sends is one whole part of
//! the session's multipart upload — part `n` (1-based) holds the bytes from
//! `(n - 1) × partBytes`, `partBytes` long, the last one shorter. S3 wants every part
//! but the last to be at least 5 MiB and at most 10 000 parts; the client names the
//! part size it wants (`forge submit --chunk-mib`, else [`DEFAULT_PART_BYTES`]) and
//! gets the nearest one within those bounds and the request body limit.

use super::error::UploadError;

/// The part size of a session whose client named none.
pub const DEFAULT_PART_BYTES: u64 = 8 << 20;

/// Most parts one upload may have (S3's limit).
pub const MAX_PARTS: u64 = 10_000;

/// The parts of one upload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartPlan {
    /// Total bytes.
    pub size: u64,
    /// Bytes of every part but the last.
    pub part_bytes: u64,
}

impl PartPlan {
    /// The plan for `size` bytes in parts of `asked` bytes (or the default) — a
    /// wish, moved into what works: at most `max_chunk` (the largest request body), at
    /// least `min_part` (the object store's smallest part but the last) and large
    /// enough for [`MAX_PARTS`]. Refused only when nothing works.
    pub fn choose(
        size: u64,
        asked: Option<u64>,
        min_part: u64,
        max_chunk: u64,
    ) -> Result<PartPlan, UploadError> {
        let lower = min_part.max(size.div_ceil(MAX_PARTS)).max(1);
        let wish = asked.unwrap_or(DEFAULT_PART_BYTES);
        if !(1..=super::MAX_CHUNK_BYTES).contains(&wish) {
            return Err(UploadError::BadPartSize {
                part_bytes: wish,
                why: format!("a part is 1 to {} bytes", super::MAX_CHUNK_BYTES),
            });
        }
        if lower > max_chunk {
            return Err(UploadError::BadPartSize {
                part_bytes: wish,
                why: format!(
                    "{size} bytes need parts of at least {lower} bytes, and a request carries \
                     at most {max_chunk}"
                ),
            });
        }
        // One part of any size is fine: no other part is smaller than the store wants.
        let part_bytes = if size <= max_chunk && wish >= size {
            size
        } else {
            wish.clamp(lower, max_chunk)
        };
        Ok(PartPlan { size, part_bytes })
    }

    /// How many parts.
    pub fn count(&self) -> u32 {
        u32::try_from(self.size.div_ceil(self.part_bytes.max(1))).unwrap_or(u32::MAX)
    }

    /// The bytes `[start, end)` of part `number`.
    pub fn range(&self, number: u32) -> [u64; 2] {
        let start = u64::from(number.saturating_sub(1)).saturating_mul(self.part_bytes);
        [
            start.min(self.size),
            start.saturating_add(self.part_bytes).min(self.size),
        ]
    }

    /// The part a chunk of `len` bytes at `offset` is, if it is exactly one.
    pub fn part_at(&self, offset: u64, len: u64) -> Result<u32, UploadError> {
        let number = offset / self.part_bytes.max(1) + 1;
        let number = u32::try_from(number).unwrap_or(u32::MAX);
        if !offset.is_multiple_of(self.part_bytes.max(1))
            || self.range(number) != [offset, offset + len]
        {
            return Err(UploadError::BadRange(format!(
                "a chunk is one whole part of the session: it starts at a multiple of \
                 partBytes ({}) and is that long, the last one shorter (part {number} is \
                 bytes {}..{})",
                self.part_bytes,
                self.range(number)[0],
                self.range(number)[1],
            )));
        }
        Ok(number)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    #[test]
    fn parts_tile_the_upload_and_a_chunk_must_be_one() {
        let plan = PartPlan::choose(20 * MIB + 3, Some(8 * MIB), 5 * MIB, 64 * MIB).expect("plan");
        assert_eq!(plan.count(), 3);
        assert_eq!(plan.range(1), [0, 8 * MIB]);
        assert_eq!(plan.range(3), [16 * MIB, 20 * MIB + 3]);
        assert_eq!(plan.part_at(8 * MIB, 8 * MIB).expect("part 2"), 2);
        assert_eq!(plan.part_at(16 * MIB, 4 * MIB + 3).expect("last"), 3);
        for (offset, len) in [
            (1, 8 * MIB),
            (0, 4 * MIB),
            (16 * MIB, 8 * MIB),
            (0, 9 * MIB),
        ] {
            let e = plan.part_at(offset, len).expect_err("not one part");
            assert!(matches!(e, UploadError::BadRange(_)), "{e:?}");
        }
    }

    #[test]
    fn the_part_size_is_the_wish_moved_into_what_the_store_and_the_limit_allow() {
        let plan = |size, asked, min, max| PartPlan::choose(size, asked, min, max).expect("plan");
        assert_eq!(
            plan(100 * MIB, None, 5 * MIB, 64 * MIB).part_bytes,
            DEFAULT_PART_BYTES
        );
        assert_eq!(
            plan(100 * MIB, None, 1, 4 * MIB).part_bytes,
            4 * MIB,
            "the body limit"
        );
        assert_eq!(
            plan(100 * MIB, Some(64 * MIB), 5 * MIB, 32 * MIB).part_bytes,
            32 * MIB
        );
        assert_eq!(
            plan(100 * MIB, Some(2 * MIB), 5 * MIB, 64 * MIB).part_bytes,
            5 * MIB,
            "S3"
        );
        assert_eq!(
            plan(100 * MIB, Some(1), 1, 64 * MIB).part_bytes,
            10_486,
            "10 000 parts"
        );
        assert_eq!(
            plan(MIB, Some(2 * MIB), 5 * MIB, 64 * MIB).part_bytes,
            MIB,
            "one part"
        );
        assert_eq!(plan(MIB, Some(2 * MIB), 5 * MIB, 64 * MIB).count(), 1);
        // Refused: outside what a part may be, or nothing works (10 000 parts of at
        // most a request each are too few).
        for (size, asked) in [
            (MIB, Some(0)),
            (MIB, Some(64 * MIB + 1)),
            (700_000 * MIB, None),
        ] {
            let e = PartPlan::choose(size, asked, 1, 64 * MIB).expect_err("refused");
            assert!(matches!(e, UploadError::BadPartSize { .. }), "{e:?}");
        }
    }
}
