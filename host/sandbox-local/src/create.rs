//! Creating a sandbox: its directories, rootfs, network, cgroups and disk, then the launcher
//! starts it and the agent answers. A create that fails leaves nothing behind (its slot and id
//! are given back and whatever was made is torn down).

use crate::*;
use orchard_agent_client::{AgentAddr, AgentClient, SandboxAgent};
use orchard_sandbox::{Result, SandboxError, SandboxInfo, SandboxSpec, SandboxStatus};
use record::{Record, now};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::watch;

impl LocalBackend {
    pub(crate) async fn create_reserved(&self, id: &str, spec: &SandboxSpec) -> Result<SandboxInfo> {
        let created = self.create_inner(id, spec).await;
        let outcome = created.map(|sandbox| {
            let info = sandbox.info();
            self.sandboxes.write().unwrap_or_else(|p| p.into_inner()).insert(id.to_string(), sandbox);
            info
        });
        self.release(id);
        outcome
    }

    pub(crate) async fn create_inner(&self, id: &str, spec: &SandboxSpec) -> Result<Arc<LocalSandbox>> {
        let t0 = std::time::Instant::now();
        let image = self.images.resolve(&spec.image).await.map_err(|e| SandboxError::Image {
            image: spec.image.clone(),
            reason: match e {
                orchard_image::ImageError::Invalid { reason, .. } => reason,
                other => other.to_string(),
            },
        })?;
        // A stop that came while the image was resolved (a pull may take minutes): nothing is
        // made, so that the stop need not wait for it.
        self.refuse_if_stopping()?;
        let dir = self.sandbox_dir(id);
        std::fs::create_dir(&dir).map_err(|e| SandboxError::backend(&format!("{}", dir.display()), e))?;
        let _ = std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700));
        // The default pids limit applies where cgroups can enforce it; asked-for limits always
        // do (and fail the create when they cannot be enforced).
        let default_pids = (!matches!(self.cgroups, cgroup::Layout::None)).then_some(self.config.default_pids);
        let limits = Limits { memory_bytes: spec.memory_bytes, cpu: spec.cpu, pids: spec.pids.or(default_pids) };
        let mut record = Record {
            id: id.to_string(),
            tenant: spec.tenant.clone(),
            image: spec.image.clone(),
            image_id: image.id.clone(),
            block_network: spec.block_network,
            network_allow: spec.network_allow.clone(),
            cpu: spec.cpu,
            memory_bytes: spec.memory_bytes,
            pids: limits.pids,
            disk_bytes: spec.disk_bytes,
            // Root hosts give every sandbox its own user namespace; rootless ones run in theirs.
            slot: if nix::unistd::geteuid().is_root() { Some(self.take_id_slot()?) } else { None },
            created_at: now(),
            last_active: now(),
            ttl_seconds: spec.ttl_seconds.unwrap_or(self.config.default_ttl.as_secs()),
            die_at: spec.lifetime_seconds.map(|s| (now() + s as f64).ceil()),
            token: random_hex(24),
            init_pid: 0,
            init_start: 0,
            cgroups: Vec::new(),
            network: None,
            spec: Some(SandboxSpec { id: Some(id.to_string()), ..spec.clone() }),
        };
        // Saved before anything is made, so that a crash mid-create is cleaned up at next start.
        record.save(&dir).map_err(SandboxError::Backend)?;
        let t1 = t0.elapsed();
        let result = self.start(&dir, &mut record, &image, spec, &limits).await;
        let t2 = t0.elapsed();
        match result {
            Ok((monitor, init_pid)) => {
                record.init_pid = init_pid;
                let init = record::open_pidfd(init_pid);
                record.init_start = record::process_start(init_pid).unwrap_or(0);
                record.save(&dir).map_err(SandboxError::Backend)?;
                let agent = Arc::new(AgentClient::new(AgentAddr::Unix(dir.join(record::SOCKET_FILE)), &record.token));
                let (exited_tx, exited) = watch::channel(false);
                let sandbox = Arc::new(LocalSandbox {
                    record: Mutex::new(record),
                    dir: dir.clone(),
                    agent: agent.clone(),
                    status: Mutex::new((SandboxStatus::Pending, None)),
                    exited,
                    deleting: AtomicBool::new(false),
                    init,
                });
                let watched = sandbox.clone();
                tokio::spawn(async move {
                    let status = monitor.exited().await;
                    if !watched.deleting.load(Ordering::Relaxed) {
                        let past_lifetime = watched.record.lock().unwrap_or_else(|p| p.into_inner()).past_lifetime();
                        let message = if past_lifetime {
                            "the sandbox reached its hard lifetime (--max-sandbox-lifetime)".to_string()
                        } else {
                            format!("the sandbox exited unexpectedly ({status})")
                        };
                        tracing::warn!(sandbox = %watched.record.lock().unwrap_or_else(|p| p.into_inner()).id, "{message}");
                        *watched.status.lock().unwrap_or_else(|p| p.into_inner()) =
                            (SandboxStatus::Failed, Some(message));
                    }
                    let _ = exited_tx.send(true);
                });
                let health = agent.wait_healthy(Duration::from_secs(10)).await;
                tracing::debug!(sandbox = id, prepare = ?t1, launch = ?(t2 - t1), ready = ?(t0.elapsed() - t2), "created");
                let started = match (health, spec.entrypoint.as_deref()) {
                    (Ok(_), Some(argv)) if !argv.is_empty() => agent
                        .start_process(&orchard_protocol::ProcessStart {
                            command: orchard_protocol::Command::Argv(argv.to_vec()),
                            cwd: None,
                            env: Default::default(),
                        })
                        .await
                        .map(|_| ()),
                    (health, _) => health.map(|_| ()),
                };
                match started {
                    Ok(()) => {
                        *sandbox.status.lock().unwrap_or_else(|p| p.into_inner()) = (SandboxStatus::Ready, None);
                        Ok(sandbox)
                    }
                    Err(e) => {
                        let log = std::fs::read_to_string(dir.join("agent.log")).unwrap_or_default();
                        self.destroy(&sandbox).await;
                        Err(SandboxError::Backend(format!(
                            "the sandbox did not start (agent, or the entrypoint): {e}; the agent log: {}",
                            log.trim()
                        )))
                    }
                }
            }
            Err(e) => {
                self.cleanup_record(&dir, &record).await;
                Err(e)
            }
        }
    }

    /// Makes the cgroups and the network, then launches bubblewrap.
    pub(crate) async fn start(
        &self,
        dir: &Path,
        record: &mut Record,
        image: &orchard_image::Image,
        spec: &SandboxSpec,
        limits: &Limits,
    ) -> Result<(launch::Monitor, i32)> {
        let t0 = std::time::Instant::now();
        // Cgroups and namespaces are named after the sandbox: a crash before the record is saved
        // again leaves nothing that reconciliation cannot find by name.
        record.cgroups = self.cgroups.create(&record.id, limits).map_err(SandboxError::InvalidSpec)?;
        let netns = if spec.block_network {
            None
        } else {
            let prepared = self
                .network_ready
                .get_or_init(|| async {
                    tokio::task::spawn_blocking(network::prepare_host).await.unwrap_or_else(|e| Err(e.to_string()))
                })
                .await;
            prepared.clone().map_err(|e| SandboxError::Backend(format!("network setup: {e}")))?;
            let allow = network::resolve_allow(&spec.network_allow).await.map_err(SandboxError::InvalidSpec)?;
            // One attach at a time within this host, so that two never race for a slot.
            let _one_at_a_time = self.network_lock.lock().await;
            let taken = self.reserved.lock().unwrap_or_else(|p| p.into_inner()).slots.clone();
            let (instance, id) = (self.instance.clone(), record.id.clone());
            let attachment =
                tokio::task::spawn_blocking(move || network::attach(&instance, &id, &|s| taken.contains(&s), allow))
                    .await
                    .map_err(|e| SandboxError::backend("network setup", e))?
                    .map_err(|e| SandboxError::Backend(format!("network setup: {e}")))?;
            self.reserved.lock().unwrap_or_else(|p| p.into_inner()).slots.insert(attachment.slot);
            let path = network::netns_path(&attachment);
            record.network = Some(attachment);
            // Firewall rules carry no name: record them before anything can crash.
            record.save(dir).map_err(SandboxError::Backend)?;
            Some(path)
        };
        tracing::debug!(sandbox = %record.id, cgroups_and_network = ?t0.elapsed(), "prepared");
        let socket = dir.join(record::SOCKET_FILE);
        let _ = std::fs::remove_file(&socket);
        let listener = std::os::unix::net::UnixListener::bind(&socket)
            .map_err(|e| SandboxError::backend(&format!("binding {}", socket.display()), e))?;
        let mut env: Vec<(String, String)> = image
            .config
            .env
            .iter()
            .filter_map(|kv| kv.split_once('=').map(|(k, v)| (k.to_string(), v.to_string())))
            .collect();
        for (k, v) in [("HOME", "/root"), ("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")] {
            if !env.iter().any(|(key, _)| key == k) {
                env.push((k.into(), v.into()));
            }
        }
        env.push(("HOSTNAME".into(), record.id.clone()));
        env.push(("ORCHARD_SANDBOX_ID".into(), record.id.clone()));
        for (k, v) in &spec.env {
            env.retain(|(key, _)| key != k);
            env.push((k.clone(), v.clone()));
        }
        let layer_dir = self.layers_dir().join(&record.id);
        // A disk from the stock (copied and attached ahead) when there is one; the stock is
        // topped up behind every create that has a limit.
        let mut prepared = None;
        let disk_image = match (spec.disk_bytes, &self.disks) {
            (Some(bytes), Ok(disks)) => {
                std::fs::create_dir_all(&layer_dir).map_err(|e| SandboxError::backend("layer dir", e))?;
                let image = layer_dir.join("disk.img");
                prepared = disks.take_prepared(bytes).filter(|p| std::fs::rename(&p.image, &image).is_ok());
                if prepared.is_none() {
                    // The stock ran out (a storm of creates): copy the template here, off the
                    // async workers (a few MiB each; on them it stalled every other request).
                    let me = self.me.get().and_then(std::sync::Weak::upgrade);
                    let me = me.ok_or_else(|| SandboxError::Backend("the backend is shutting down".into()))?;
                    let to = image.clone();
                    tokio::task::spawn_blocking(move || match &me.disks {
                        Ok(disks) => disks.make(bytes, &to),
                        Err(e) => Err(e.clone()),
                    })
                    .await
                    .map_err(|e| SandboxError::backend("making the disk", e))?
                    .map_err(SandboxError::Backend)?;
                }
                self.refill_disks(bytes);
                Some(image)
            }
            _ => None,
        };
        // A forked child's layer: owners moved to its id range, then its upper directory (or,
        // inside a disk image, copied in once the image is mounted).
        let seed = self.seeds.lock().unwrap_or_else(|p| p.into_inner()).remove(&record.id);
        let mut disk_seed = None;
        if let Some(seed) = seed {
            let to = record.slot.map(ids::host_id_base);
            let upper = layer_dir.join("upper");
            let into_disk = disk_image.is_some();
            let placed = seed.upper.clone();
            tokio::task::spawn_blocking(move || -> std::result::Result<(), String> {
                if let (Some(from), Some(to)) = (seed.from_base, to) {
                    fork::shift_owners(&seed.upper, from, to)?;
                }
                if into_disk {
                    return Ok(());
                }
                std::fs::create_dir_all(upper.parent().unwrap_or(&upper)).map_err(|e| e.to_string())?;
                std::fs::rename(&seed.upper, &upper).map_err(|e| format!("{}: {e}", upper.display()))
            })
            .await
            .map_err(|e| SandboxError::backend("placing the forked layer", e))?
            .map_err(|e| SandboxError::Backend(format!("placing the forked layer: {e}")))?;
            if into_disk {
                disk_seed = Some(placed);
            }
        }
        let launched = launch::launch(
            launch::LaunchSpec {
                disk_image: disk_image.as_deref(),
                loop_device: match &prepared {
                    Some(p) => rootfs::LoopDevice::Attached(p.loop_index),
                    None => rootfs::LoopDevice::Attach(record.slot.map(ids::loop_index)),
                },
                seed: disk_seed,
                layer_dir: &layer_dir,
                launcher: self.config.launcher.clone(),
                bwrap: &self.config.bwrap,
                agent_binary: &self.config.agent_binary,
                program_cache: self.config.program_cache.as_deref(),
                dir,
                image,
                hostname: &record.id,
                env,
                // Orchard Env's sandboxes work in /workspace when the image names no directory;
                // its clients expect exec and apply_patch to start there.
                workdir: spec
                    .workdir
                    .clone()
                    .or_else(|| image.config.working_dir.clone().filter(|w| !w.is_empty()))
                    .unwrap_or_else(|| DEFAULT_WORKDIR.into()),
                listener: listener.into(),
                cgroups: &record.cgroups,
                file_roots: &spec.file_roots,
                id_base: record.slot.map(ids::host_id_base),
                cgroup_view: self.cgroups.view(&record.cgroups),
                etc_files: etc_files(&record.id, record.network.as_ref().map(|a| a.sandbox_ip), netns.is_some()),
                netns,
                die_at: record.die_at.map(|t| t as u64),
                die_at_until_claimed: record.tenant == crate::pool::POOL_TENANT,
            },
            &record.token,
        )
        .await
        .map_err(|e| SandboxError::Backend(format!("starting the sandbox: {e}")))?;
        // The sandbox's mount holds the stocked device now (the setup is done).
        drop(prepared);
        Ok((launched.monitor, launched.init_pid))
    }
}

impl LocalBackend {
    /// Tops up the stock of disks of `bytes` in the background (no task when it is full).
    fn refill_disks(&self, bytes: u64) {
        if !self.disks.as_ref().is_ok_and(|d| d.stock_short(bytes)) {
            return;
        }
        let Some(me) = self.me.get().and_then(std::sync::Weak::upgrade) else { return };
        tokio::task::spawn_blocking(move || {
            if let Ok(disks) = &me.disks
                && let Err(e) = disks.refill(bytes)
            {
                tracing::warn!("making disks ahead: {e}");
            }
        });
    }
}

/// /etc/hosts, /etc/hostname and /etc/resolv.conf for a sandbox, as Docker writes them: its
/// name resolves to its own address (loopback without a network), and name servers are the
/// host's, except those on the host's loopback, which a sandbox cannot reach.
pub(crate) fn etc_files(hostname: &str, address: Option<std::net::Ipv4Addr>, open_network: bool) -> [String; 3] {
    let own = address.map(|a| a.to_string()).unwrap_or_else(|| "127.0.1.1".into());
    let hosts = format!(
        "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\nfe00::0\tip6-localnet\n\
         ff00::0\tip6-mcastprefix\nff02::1\tip6-allnodes\nff02::2\tip6-allrouters\n{own}\t{hostname}\n"
    );
    let host_resolv = std::fs::read_to_string("/etc/resolv.conf").unwrap_or_default();
    let mut resolv: String = host_resolv
        .lines()
        .filter(|l| {
            let mut words = l.split_whitespace();
            match (words.next(), words.next()) {
                (Some("nameserver"), Some(addr)) => {
                    addr.parse::<std::net::IpAddr>().map(|ip| !ip.is_loopback()).unwrap_or(false)
                }
                _ => true,
            }
        })
        .map(|l| format!("{l}\n"))
        .collect();
    if open_network && !resolv.lines().any(|l| l.starts_with("nameserver")) {
        resolv.push_str("nameserver 8.8.8.8\nnameserver 8.8.4.4\n");
    }
    [hosts, format!("{hostname}\n"), resolv]
}
