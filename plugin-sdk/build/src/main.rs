//! `forge-plugin build <crate-dir>...`: build policy plugin crates into components.

use std::path::PathBuf;

use anyhow::{Context, bail};

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let Some(cmd) = args.next() else {
        bail!(
            "usage: forge-plugin build [--out DIR] [--profile NAME] [--target-dir DIR] <crate-dir>..."
        );
    };
    if cmd != "build" {
        bail!("unknown command `{cmd}`; try `forge-plugin build <crate-dir>`");
    }
    let mut opts = forge_plugin_build::BuildOptions {
        profile: "plugin".into(),
        target_dir: PathBuf::from("target/plugins"),
        out_dir: PathBuf::from("target/plugins/components"),
    };
    let mut crates = Vec::new();
    while let Some(a) = args.next() {
        match a.as_str() {
            "--out" => opts.out_dir = args.next().context("--out needs a directory")?.into(),
            "--profile" => opts.profile = args.next().context("--profile needs a name")?,
            "--target-dir" => {
                opts.target_dir = args
                    .next()
                    .context("--target-dir needs a directory")?
                    .into()
            }
            _ => crates.push(PathBuf::from(a)),
        }
    }
    if crates.is_empty() {
        bail!("name at least one plugin crate directory");
    }
    for dir in crates {
        let out = forge_plugin_build::build(&dir, &opts)
            .with_context(|| format!("building {}", dir.display()))?;
        println!("{}", out.display());
    }
    Ok(())
}
