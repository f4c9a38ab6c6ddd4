//! What the heap writes to the WAL: one record per commit (with every change
//! of the transaction), preceded, for large transactions, by data records.
//!
//! ```text
//! TxnData    kind 1  txn u64 | ops...            changes logged before commit
//! Commit     kind 2  txn u64 | ts u64 | ops...   the commit, with the last changes
//! RollbackTo kind 3  txn u64 | op_count u64      ROLLBACK TO SAVEPOINT cut logged changes
//! Abort      kind 4  txn u64                     the transaction rolled back
//!
//! op: tag u8, then
//!   1 Insert   table u64 | slot u64 | len u32 | row
//!   2 Update   table u64 | slot u64 | len u32 | row
//!   3 Delete   table u64 | slot u64
//!   4 Create   len u32 | table definition (JSON)
//!   5 Drop     table u64
//!   6 Redefine len u32 | table definition (JSON)   same id, new definition
//! ```
//!
//! Replay collects a transaction's ops until its Commit and applies them at
//! the commit's timestamp; ops of transactions with no Commit are dropped.

use zyron_common::{Result, SqlState, ZyronError};

pub const KIND_TXN_DATA: u8 = 1;
pub const KIND_COMMIT: u8 = 2;
pub const KIND_ROLLBACK_TO: u8 = 3;
pub const KIND_ABORT: u8 = 4;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    Insert { table: u64, slot: u64, row: Vec<u8> },
    Update { table: u64, slot: u64, row: Vec<u8> },
    Delete { table: u64, slot: u64 },
    Create { def: Vec<u8> },
    Drop { table: u64 },
    Redefine { def: Vec<u8> },
}

/// Appends one op to `out`.
pub fn encode_op(out: &mut Vec<u8>, op: &Op) {
    let put_u64 = |out: &mut Vec<u8>, v: u64| out.extend_from_slice(&v.to_le_bytes());
    let put_bytes = |out: &mut Vec<u8>, b: &[u8]| {
        out.extend_from_slice(&(b.len() as u32).to_le_bytes());
        out.extend_from_slice(b);
    };
    match op {
        Op::Insert { table, slot, row } | Op::Update { table, slot, row } => {
            out.push(if matches!(op, Op::Insert { .. }) {
                1
            } else {
                2
            });
            put_u64(out, *table);
            put_u64(out, *slot);
            put_bytes(out, row);
        }
        Op::Delete { table, slot } => {
            out.push(3);
            put_u64(out, *table);
            put_u64(out, *slot);
        }
        Op::Create { def } | Op::Redefine { def } => {
            out.push(if matches!(op, Op::Create { .. }) {
                4
            } else {
                6
            });
            put_bytes(out, def);
        }
        Op::Drop { table } => {
            out.push(5);
            put_u64(out, *table);
        }
    }
}

/// Reads little-endian fields off a record, failing with XX001 when it runs out.
pub struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    pub fn new(bytes: &'a [u8]) -> Self {
        Reader { bytes, at: 0 }
    }

    pub fn is_empty(&self) -> bool {
        self.at >= self.bytes.len()
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        let end = self
            .at
            .checked_add(n)
            .filter(|&e| e <= self.bytes.len())
            .ok_or_else(|| {
                ZyronError::new(
                    SqlState::DATA_CORRUPTED,
                    "WAL record ends in the middle of a field",
                )
            })?;
        let slice = &self.bytes[self.at..end];
        self.at = end;
        Ok(slice)
    }

    pub fn u8(&mut self) -> Result<u8> {
        Ok(self.take(1)?[0])
    }

    pub fn u32(&mut self) -> Result<u32> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().unwrap()))
    }

    pub fn u64(&mut self) -> Result<u64> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().unwrap()))
    }

    pub fn bytes(&mut self) -> Result<&'a [u8]> {
        let len = self.u32()? as usize;
        self.take(len)
    }

    pub fn op(&mut self) -> Result<Op> {
        Ok(match self.u8()? {
            tag @ (1 | 2) => {
                let (table, slot, row) = (self.u64()?, self.u64()?, self.bytes()?.to_vec());
                if tag == 1 {
                    Op::Insert { table, slot, row }
                } else {
                    Op::Update { table, slot, row }
                }
            }
            3 => Op::Delete {
                table: self.u64()?,
                slot: self.u64()?,
            },
            4 => Op::Create {
                def: self.bytes()?.to_vec(),
            },
            5 => Op::Drop { table: self.u64()? },
            6 => Op::Redefine {
                def: self.bytes()?.to_vec(),
            },
            other => {
                return Err(ZyronError::new(
                    SqlState::DATA_CORRUPTED,
                    format!("WAL record holds unknown op {other}"),
                ));
            }
        })
    }

    /// Every op left in the record.
    pub fn ops(&mut self) -> Result<Vec<Op>> {
        let mut ops = Vec::new();
        while !self.is_empty() {
            ops.push(self.op()?);
        }
        Ok(ops)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ops_round_trip_and_truncation_is_an_error() {
        let ops = vec![
            Op::Insert {
                table: 1,
                slot: 2,
                row: vec![1, 2, 3],
            },
            Op::Update {
                table: 1,
                slot: 2,
                row: vec![],
            },
            Op::Delete {
                table: 9,
                slot: u64::MAX,
            },
            Op::Create {
                def: b"{}".to_vec(),
            },
            Op::Drop { table: 4 },
            Op::Redefine {
                def: b"{\"x\":1}".to_vec(),
            },
        ];
        let mut bytes = Vec::new();
        for op in &ops {
            encode_op(&mut bytes, op);
        }
        assert_eq!(Reader::new(&bytes).ops().unwrap(), ops);
        let err = Reader::new(&bytes[..bytes.len() - 1]).ops().unwrap_err();
        assert_eq!(err.sqlstate(), SqlState::DATA_CORRUPTED);
        assert!(Reader::new(&[99]).ops().is_err());
    }
}
