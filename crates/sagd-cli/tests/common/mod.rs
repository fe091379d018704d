//! What the binary's test files share.
#![allow(dead_code)]

use std::process::Command;

/// The binary under test.
pub fn sagd() -> Command {
    Command::new(env!("CARGO_BIN_EXE_sagd"))
}

/// A short E2 replication whose checkpoints fall mid fine-tuning (`--interrupt-after 13` with
/// `--checkpoint-every 4`); the output folder follows.
pub const E2_SHORT: [&str; 13] = [
    "debias",
    "--dist",
    "exp",
    "--quiet",
    "--n",
    "200",
    "--pretrain-epochs",
    "40",
    "--finetune-epochs",
    "30",
    "--m",
    "2000",
    "--out",
];
