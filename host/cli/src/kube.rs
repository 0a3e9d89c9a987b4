//! `orchard kube …`: what an operator applies to a cluster beside the server.
//!
//! `orchard kube prepull IMAGES` prints DaemonSets that pull a dataset's images onto every node
//! sandboxes run on (see `orchard_sandbox_k8s::prepull`), as one JSON `List` for
//! `kubectl apply -f -`.

use std::path::PathBuf;

use anyhow::Context;
use clap::Subcommand;

use crate::backend::KubeArgs;

#[derive(Subcommand)]
pub enum KubeCommand {
    /// Print DaemonSets that pre-pull a dataset's images on the sandbox nodes (pipe to
    /// `kubectl apply -f -`).
    Prepull {
        /// A file of image references, one a line (`#` comments and blank lines skipped); `-`
        /// reads standard input.
        images: PathBuf,
        /// Names the DaemonSets (`NAME-0`, `NAME-1`, …).
        #[arg(long, default_value = "orchard-prepull")]
        name: String,
        /// Images per DaemonSet (each is an init container of its pod).
        #[arg(long, default_value_t = 50)]
        per_daemonset: usize,
        /// The image that keeps each pod alive once its images are pulled.
        #[arg(long, default_value = orchard_sandbox_k8s::prepull::PAUSE_IMAGE)]
        pause_image: String,
        #[command(flatten)]
        kube: Box<KubeArgs>,
    },
}

pub fn run(command: KubeCommand) -> anyhow::Result<i32> {
    match command {
        KubeCommand::Prepull { images, name, per_daemonset, pause_image, kube } => {
            let text = if images.as_os_str() == "-" {
                std::io::read_to_string(std::io::stdin()).context("reading image references from stdin")?
            } else {
                std::fs::read_to_string(&images).with_context(|| format!("reading {}", images.display()))?
            };
            let references = image_lines(&text)?;
            anyhow::ensure!(!references.is_empty(), "{}: no image references", images.display());
            anyhow::ensure!((1..=200).contains(&per_daemonset), "--per-daemonset: between 1 and 200");
            orchard_sandbox::valid_sandbox_id(&name).map_err(|e| anyhow::anyhow!("--name: {e}"))?;
            let sets = orchard_sandbox_k8s::prepull::daemonsets(
                &kube.cluster(),
                &name,
                &references,
                per_daemonset,
                &pause_image,
            );
            let list = serde_json::json!({"apiVersion": "v1", "kind": "List", "items": sets});
            println!("{}", serde_json::to_string_pretty(&list)?);
            eprintln!(
                "orchard: {} images in {} DaemonSets for namespace {}",
                references.len(),
                sets.len(),
                kube.cluster().namespace
            );
            Ok(0)
        }
    }
}

/// The image references of a list, one a line; a line that cannot be one is refused by number.
fn image_lines(text: &str) -> anyhow::Result<Vec<String>> {
    let mut images = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let ok = line.len() <= 512
            && !line.contains(char::is_whitespace)
            && line.chars().all(|c| c.is_ascii_alphanumeric() || "./:-_@+".contains(c));
        anyhow::ensure!(ok, "line {}: {line:?} is not an image reference", n + 1);
        images.push(line.to_string());
    }
    Ok(images)
}

#[cfg(test)]
mod tests {
    #[test]
    fn image_lists_skip_comments_and_refuse_what_is_not_a_reference() {
        let images = super::image_lines("# SWE-bench\nswebench/a:1\n\n  ghcr.io/x/y@sha256:ab  \n").unwrap();
        assert_eq!(images, ["swebench/a:1", "ghcr.io/x/y@sha256:ab"]);
        let err = super::image_lines("ok:1\nnot an image\n").unwrap_err().to_string();
        assert!(err.contains("line 2"), "{err}");
    }
}
