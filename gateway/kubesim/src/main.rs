//! `forge-kubesim` binary: starts the emulator and prints its kubeconfig.

fn main() {}
