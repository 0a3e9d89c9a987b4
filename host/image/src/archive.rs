//! Image archives: an OCI archive (a tarred layout) or a `docker save` tar.
//!
//! The archive is unpacked to a scratch directory once, its layers applied, and a small memo
//! (keyed by the archive's path, size and mtime) records the result so that later starts of the
//! host do not unpack it again.

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::layout::{self, ParsedImage};
use crate::{Image, ImageError, ImageStore, Result, RunConfig};

#[derive(Serialize, Deserialize)]
struct Memo {
    manifest_digest: String,
    config: RunConfig,
}

pub(crate) async fn resolve_archive(store: &ImageStore, reference: &str, path: &Path) -> Result<Image> {
    let meta = std::fs::metadata(path).map_err(|e| ImageError::io(path, e))?;
    let key = hex::encode(Sha256::digest(format!(
        "{}\0{}\0{}",
        path.display(),
        meta.len(),
        meta.mtime_nsec() + meta.mtime() * 1_000_000_000
    )));
    let memo_dir = store.cache_dir().join("archives");
    let memo_path = memo_dir.join(format!("{key}.json"));
    if let Ok(bytes) = std::fs::read(&memo_path)
        && let Ok(memo) = serde_json::from_slice::<Memo>(&bytes)
    {
        let root = store.cache_dir().join("rootfs").join(memo.manifest_digest.replace(':', "-"));
        if root.is_dir() {
            return Ok(Image {
                reference: reference.into(),
                id: memo.manifest_digest,
                root,
                ro_binds: vec![],
                config: memo.config,
            });
        }
    }
    let scratch = store.cache_dir().join("tmp").join(format!("archive-{key}"));
    let _ = std::fs::remove_dir_all(&scratch);
    std::fs::create_dir_all(&scratch).map_err(|e| ImageError::io(&scratch, e))?;
    let (path2, scratch2) = (path.to_path_buf(), scratch.clone());
    let unpacked = tokio::task::spawn_blocking(move || -> std::result::Result<(), String> {
        let file = std::fs::File::open(&path2).map_err(|e| e.to_string())?;
        let mut archive = tar::Archive::new(std::io::BufReader::new(file));
        for entry in archive.entries().map_err(|e| e.to_string())? {
            let mut entry = entry.map_err(|e| e.to_string())?;
            if !entry.unpack_in(&scratch2).map_err(|e| e.to_string())? {
                return Err("an entry would land outside the archive".into());
            }
        }
        Ok(())
    })
    .await
    .map_err(|e| ImageError::invalid(reference, e))?;
    let result = match unpacked {
        Err(e) => Err(ImageError::invalid(reference, format!("not a readable tar: {e}"))),
        Ok(()) if !(layout::is_layout(&scratch) || layout::is_docker_save(&scratch)) => Err(ImageError::invalid(
            reference,
            "the tar is neither an OCI archive (oci-layout, index.json) nor a docker save (manifest.json)",
        )),
        Ok(()) => match layout::read(&scratch, None) {
            Ok(parsed) => unpack_and_memo(store, reference, parsed, &memo_dir, &memo_path).await,
            Err(e) => Err(ImageError::invalid(reference, e)),
        },
    };
    let _ = std::fs::remove_dir_all(&scratch);
    result
}

async fn unpack_and_memo(
    store: &ImageStore,
    reference: &str,
    parsed: ParsedImage,
    memo_dir: &Path,
    memo_path: &Path,
) -> Result<Image> {
    let image = store.unpacked(reference, parsed).await?;
    let memo = Memo { manifest_digest: image.id.clone(), config: image.config.clone() };
    let _ = std::fs::create_dir_all(memo_dir);
    let _ = std::fs::write(memo_path, serde_json::to_vec(&memo).expect("memo serialises"));
    Ok(image)
}
