//! The files a run's lead and its workers hand each other (bundles of a
//! workspace, and of a sub-agent's work), in a JetStream object store. Each
//! is named after its run, read back only as the size and SHA-256 digest its
//! sender named (in a signed task, or a result) and at most [`MAX_FILE`];
//! a run's are removed when it ends, and any left go after a day.

use std::path::Path;

use async_nats::jetstream::{self, object_store};
use futures::StreamExt;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::subjects::FILES;
use crate::protocol::SessionId;

/// The largest file put or read back: a bundle larger than this is refused.
pub const MAX_FILE: u64 = 1 << 30;

/// How long a file being read back may send nothing before it is given up.
const SILENCE: std::time::Duration = std::time::Duration::from_secs(60);

/// How long putting a file may take at least; a larger one gets a second
/// more for each 256 KiB.
const PUTTING: std::time::Duration = std::time::Duration::from_secs(60);

/// A file put in the store: where, what commit it brings, and what its
/// bytes must be.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stored {
    /// Its name in the store (and the bundle's).
    pub object: String,
    /// The commit the bundle brings.
    pub tip: String,
    /// The SHA-256 of its bytes, in hex.
    pub digest: String,
    /// Its size in bytes.
    pub size: u64,
}

/// The name of run `run`'s file `what` (`base.<commit>`, `work.<session>`).
pub fn object(run: SessionId, what: &str) -> String {
    format!("{run}.{what}")
}

/// The object store of every run's files ([`FILES`]), made with the
/// streams (`subjects::join`).
#[derive(Clone)]
pub struct Store(object_store::ObjectStore);

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Store")
    }
}

/// A digest's bytes in hex.
fn hex(digest: &[u8]) -> String {
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

impl Store {
    /// The store the streams were made with.
    pub async fn open(js: &jetstream::Context) -> Result<Self, String> {
        super::subjects::patiently(|| async {
            js.get_object_store(FILES)
                .await
                .map(Self)
                .map_err(|e| format!("cannot find the store {FILES}: {e}"))
        })
        .await
    }

    /// Puts `file` in the store as `object`, the bundle of commit `tip`.
    pub async fn put(&self, object: &str, file: &Path, tip: &str) -> Result<Stored, String> {
        let said = |e: &dyn std::fmt::Display| format!("cannot store {}: {e}", file.display());
        // Its digest first: what is put is what was hashed, as the file is
        // the sender's own and unchanged.
        let mut hasher = Sha256::new();
        let mut size = 0u64;
        let mut reading = tokio::fs::File::open(file).await.map_err(|e| said(&e))?;
        let mut buffer = vec![0u8; 1 << 16];
        loop {
            let n = reading.read(&mut buffer).await.map_err(|e| said(&e))?;
            if n == 0 {
                break;
            }
            hasher.update(&buffer[..n]);
            size += n as u64;
        }
        if size > MAX_FILE {
            return Err(format!(
                "{} is {size} bytes, more than the {MAX_FILE} a file may be",
                file.display()
            ));
        }
        let within = PUTTING + std::time::Duration::from_secs(size >> 18);
        super::subjects::patiently(|| async {
            let mut reading = tokio::fs::File::open(file).await.map_err(|e| said(&e))?;
            match tokio::time::timeout(within, self.0.put(object, &mut reading)).await {
                Ok(put) => put.map_err(|e| said(&e)),
                Err(_) => Err(said(&format!("not stored within {}s", within.as_secs()))),
            }
        })
        .await?;
        Ok(Stored {
            object: object.to_owned(),
            tip: tip.to_owned(),
            digest: hex(&hasher.finalize()),
            size,
        })
    }

    /// Writes `stored` into `file` (made new), refused unless it is at most
    /// [`MAX_FILE`] and its bytes are the size and digest it names.
    pub async fn get(&self, stored: &Stored, file: &Path) -> Result<(), String> {
        let name = &stored.object;
        if stored.size > MAX_FILE {
            return Err(format!(
                "{name} is {} bytes, more than the {MAX_FILE} a file may be",
                stored.size
            ));
        }
        let mut object = super::subjects::patiently(|| async {
            (self.0.get(name).await).map_err(|e| format!("cannot fetch {name}: {e}"))
        })
        .await?;
        let mut out = tokio::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(file)
            .await
            .map_err(|e| format!("{}: {e}", file.display()))?;
        let mut hasher = Sha256::new();
        let mut size = 0u64;
        let mut buffer = vec![0u8; 1 << 16];
        loop {
            let read = tokio::time::timeout(SILENCE, object.read(&mut buffer)).await;
            let n = match read {
                Ok(read) => read.map_err(|e| format!("cannot fetch {name}: {e}"))?,
                Err(_) => {
                    return Err(format!(
                        "cannot fetch {name}: nothing came for {}s",
                        SILENCE.as_secs()
                    ));
                }
            };
            if n == 0 {
                break;
            }
            size += n as u64;
            if size > stored.size {
                return Err(format!("{name} is larger than its {} bytes", stored.size));
            }
            hasher.update(&buffer[..n]);
            (out.write_all(&buffer[..n]).await).map_err(|e| format!("{}: {e}", file.display()))?;
        }
        out.flush()
            .await
            .map_err(|e| format!("{}: {e}", file.display()))?;
        let digest = hex(&hasher.finalize());
        if size != stored.size || digest != stored.digest {
            return Err(format!(
                "{name} is not the file its sender named (its bytes differ)"
            ));
        }
        Ok(())
    }

    /// Removes run `run`'s files.
    pub async fn remove_run(&self, run: SessionId) {
        let prefix = format!("{run}.");
        let Ok(mut listed) = self.0.list().await else {
            return;
        };
        let mut names = Vec::new();
        while let Some(info) = listed.next().await {
            match info {
                Ok(info) if info.name.starts_with(&prefix) => names.push(info.name),
                Ok(_) => {}
                Err(_) => break,
            }
        }
        for name in names {
            if let Err(e) = self.0.delete(&name).await {
                tracing::warn!(error = %e, object = %name, "cannot remove the run's file");
            }
        }
    }

    /// Removes file `object`.
    pub async fn remove(&self, object: &str) {
        let _ = self.0.delete(object).await;
    }
}
