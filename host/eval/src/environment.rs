//! A task's environment in its sandbox, as its Dockerfile describes it: files copied and
//! archives unpacked from the build context (read beneath it), the image's service started and
//! waited for, the task's X desktop started, and folders uploaded as tar streams.

use std::path::Path;

use orchard_agent_client::SandboxAgent;
use orchard_task_files::TaskFiles;

use crate::healthcheck::Healthcheck;
use crate::task::Task;

/// A task's environment as its Dockerfile describes it: files copied and archives unpacked.
pub(crate) async fn prepare_environment(agent: &dyn SandboxAgent, task: &Task) -> Result<(), String> {
    if let Some(context) = &task.context {
        for (src, dest) in &task.copies {
            copy_in(agent, context, src, dest).await?;
        }
        for (archive, dest) in &task.archives {
            unpack_in(agent, context, archive, dest).await?;
        }
    }
    // The desktop first: the task's own service may be an app on it.
    if let Some(desktop) = &task.desktop {
        orchard_desktop_client::Desktop::start(agent, desktop).await.map_err(|e| format!("desktop: {e}"))?;
    }
    let app = start_service(agent, task).await?;
    if let Some(desktop) = &task.desktop
        && let Some(title) = &desktop.wait_for_window
    {
        wait_for_app_window(agent, task, desktop.port, title, app).await?;
    }
    Ok(())
}

/// Waits for the task's app to open its window. An app whose window has not shown in 20 s is
/// started again, once: under load, Mousepad was seen to create its window and never map it
/// (about 1 in 8 with 24 desktops on 2 cores), which a restart clears. 60 s in all.
async fn wait_for_app_window(
    agent: &dyn SandboxAgent,
    task: &Task,
    port: u16,
    title: &str,
    mut app: Option<String>,
) -> Result<(), String> {
    use orchard_desktop_client::{Desktop, DesktopError};
    use std::time::Duration;
    let first = Desktop::wait_for_window(agent, port, title, Duration::from_secs(20)).await;
    let waited = match (first, app.take()) {
        (Ok(()), _) => return Ok(()),
        (Err(DesktopError::Timeout(_)), Some(id)) => {
            tracing::warn!(task = %task.id, "the app's window did not show in 20 s: starting the app again");
            let _ = agent.signal_process(&id, "KILL").await;
            // Gone before the next starts: a GTK app still on the session bus would be asked
            // to open the window instead, and would not answer.
            for _ in 0..50 {
                match agent.process(&id).await {
                    Ok(p) if p.state == orchard_protocol::ProcessState::Running => {
                        tokio::time::sleep(Duration::from_millis(100)).await
                    }
                    _ => break,
                }
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
            start_service(agent, task).await?;
            Desktop::wait_for_window(agent, port, title, Duration::from_secs(40)).await
        }
        (Err(e), _) => Err(e),
    };
    if let Err(e) = waited {
        let tail = entrypoint_log_tail(agent).await;
        return Err(format!("desktop: {e}; the task's command's output ends with:\n{tail}"));
    }
    Ok(())
}

/// For a desktop task: how its app (the task's command) ended, when it crashed during the
/// rollout (a signal, or a non-zero exit): its command, the end of its output. An app the agent
/// closed (exit 0) or still running is not news.
pub(crate) async fn app_crash(agent: &dyn SandboxAgent, task: &Task) -> Option<String> {
    let argv = task.start.as_ref().filter(|_| task.desktop.is_some())?;
    let processes = agent.list_processes().await.ok()?;
    let app = processes.iter().rev().find(|p| p.command.contains("/tmp/orchard-entrypoint.log"))?;
    if app.state == orchard_protocol::ProcessState::Running || app.exit_code == Some(0) {
        return None;
    }
    let how = app.exit_code.map_or_else(|| "by a signal".to_string(), |c| format!("with code {c}"));
    let tail = entrypoint_log_tail(agent).await;
    Some(format!("the task's app ({}) exited {how} during the rollout; its output ends with:\n{tail}", argv.join(" ")))
}

/// Starts the Dockerfile's ENTRYPOINT/CMD in the background (its output in
/// `/tmp/orchard-entrypoint.log`), then waits until the task's healthcheck passes; the
/// background process's id, when there is one.
async fn start_service(agent: &dyn SandboxAgent, task: &Task) -> Result<Option<String>, String> {
    let mut process = None;
    if let Some(argv) = &task.start {
        // The command's own words reach it as `sh`'s arguments: nothing to quote.
        let mut command: Vec<String> =
            ["sh", "-c", "exec \"$@\" > /tmp/orchard-entrypoint.log 2>&1 < /dev/null", "sh"].map(String::from).to_vec();
        command.extend(argv.iter().cloned());
        let start = orchard_protocol::ProcessStart {
            command: orchard_protocol::Command::Argv(command),
            cwd: task.workdir.clone(),
            env: task.env.clone(),
        };
        let started = agent
            .start_process(&start)
            .await
            .map_err(|e| format!("starting the task's ENTRYPOINT/CMD {argv:?}: {e}"))?;
        process = Some(started.id);
    }
    let Some(check) = &task.healthcheck else { return Ok(process) };
    wait_healthy(agent, task, check).await?;
    Ok(process)
}

/// Docker's HEALTHCHECK semantics: failures in the start period do not count; after it,
/// `retries` failures in a row give up.
pub(crate) async fn wait_healthy(agent: &dyn SandboxAgent, task: &Task, check: &Healthcheck) -> Result<(), String> {
    let started = std::time::Instant::now();
    let mut failures = 0;
    loop {
        let mut req = orchard_protocol::ExecRequest::new(orchard_protocol::Command::Argv(check.argv.clone()));
        req.cwd = task.workdir.clone();
        req.env = task.env.clone();
        req.timeout_ms = Some(check.timeout.as_millis().max(1) as u64);
        let mut said = String::new();
        if let Ok(r) = agent.exec(&req).await {
            if r.exit_code == 0 {
                return Ok(());
            }
            said = format!("{}{}", r.stdout.text, r.stderr.text);
        }
        let pause = if started.elapsed() < check.start_period {
            check.start_interval
        } else {
            failures += 1;
            if failures >= check.retries {
                let tail = entrypoint_log_tail(agent).await;
                let own: String = said.chars().rev().take(2000).collect::<Vec<_>>().into_iter().rev().collect();
                let own = if own.trim().is_empty() { String::new() } else { format!("; it said:\n{}", own.trim_end()) };
                return Err(format!(
                    "the task's healthcheck ({:?}) did not pass in {:.0} s ({failures} failures after the start \
                     period){own}; the service's output ends with:\n{tail}",
                    check.argv,
                    started.elapsed().as_secs_f64()
                ));
            }
            check.interval
        };
        tokio::time::sleep(pause.max(std::time::Duration::from_millis(10))).await;
    }
}

/// The last 2,000 bytes of what the task's ENTRYPOINT/CMD printed, for an error that says why.
async fn entrypoint_log_tail(agent: &dyn SandboxAgent) -> String {
    let log = agent.read_file("/tmp/orchard-entrypoint.log").await.unwrap_or_default();
    String::from_utf8_lossy(&log[log.len().saturating_sub(2000)..]).into_owned()
}

pub(crate) fn ignore_missing(
    e: orchard_agent_client::AgentClientError,
) -> Result<(), orchard_agent_client::AgentClientError> {
    if e.kind() == orchard_protocol::ErrorKind::NotFound { Ok(()) } else { Err(e) }
}

/// A Dockerfile COPY: a directory lands at `dest`; a file lands at `dest`, or inside it when
/// `dest` ends in '/' or is a directory already.
async fn copy_in(agent: &dyn SandboxAgent, context: &TaskFiles, src: &Path, dest: &str) -> Result<(), String> {
    if context.is_dir(src) {
        return upload_dir(agent, context, src, dest.trim_end_matches('/')).await;
    }
    let into_dir =
        dest.ends_with('/') || agent.stat(dest).await.is_ok_and(|s| s.kind == orchard_protocol::FileKind::Directory);
    let target = if into_dir {
        format!(
            "{}/{}",
            dest.trim_end_matches('/'),
            src.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()
        )
    } else {
        dest.to_string()
    };
    let (files, rel) = (context.clone(), src.to_path_buf());
    let bytes = tokio::task::spawn_blocking(move || files.read(&rel, crate::MAX_COPY_BYTES))
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| format!("COPY {e}"))?
        .ok_or_else(|| format!("COPY {}: no such file", context.display(src)))?;
    let mode = context.mode(src);
    agent
        .write_file(&target, orchard_agent_client::full(bytes), mode, true)
        .await
        .map_err(|e| format!("COPY {} {target}: {e}", context.display(src)))?;
    Ok(())
}

/// Unpacks a tar archive of the build context (gzipped or not) at `dest` in the sandbox, as
/// Docker's ADD does.
async fn unpack_in(agent: &dyn SandboxAgent, context: &TaskFiles, archive: &Path, dest: &str) -> Result<(), String> {
    let what = format!("ADD {}", context.display(archive));
    let (files, rel) = (context.clone(), archive.to_path_buf());
    let read = move || -> std::io::Result<Vec<u8>> {
        let bytes = files
            .read(&rel, crate::MAX_COPY_BYTES)
            .map_err(std::io::Error::other)?
            .ok_or_else(|| std::io::Error::other("no such file"))?;
        if bytes.starts_with(&[0x1f, 0x8b]) {
            let mut out = Vec::new();
            let mut limited = std::io::Read::take(flate2::read::GzDecoder::new(&bytes[..]), crate::MAX_COPY_BYTES + 1);
            std::io::Read::read_to_end(&mut limited, &mut out)?;
            if out.len() as u64 > crate::MAX_COPY_BYTES {
                return Err(std::io::Error::other(format!("unpacks to more than {} bytes", crate::MAX_COPY_BYTES)));
            }
            Ok(out)
        } else {
            Ok(bytes)
        }
    };
    upload_tar(agent, dest, read, &what, &format!("{what} {dest}")).await
}

/// Copies a folder of the task's files into the sandbox (as a tar stream; links kept as links,
/// never followed on the host).
pub(crate) async fn upload_dir(
    agent: &dyn SandboxAgent,
    files: &TaskFiles,
    rel: &Path,
    to: &str,
) -> Result<(), String> {
    let (files, rel) = (files.clone(), rel.to_path_buf());
    let pack = move || files.pack(&rel, crate::MAX_COPY_BYTES).map_err(std::io::Error::other);
    upload_tar(agent, to, pack, &format!("packing {to}"), &format!("copying {to} into the sandbox")).await
}

/// Makes a tar archive off the async threads and unpacks it at `to` in the sandbox; errors say
/// which step failed with `making` or `uploading`.
async fn upload_tar(
    agent: &dyn SandboxAgent,
    to: &str,
    make: impl FnOnce() -> std::io::Result<Vec<u8>> + Send + 'static,
    making: &str,
    uploading: &str,
) -> Result<(), String> {
    let archive =
        tokio::task::spawn_blocking(make).await.map_err(|e| e.to_string())?.map_err(|e| format!("{making}: {e}"))?;
    agent.tar_upload(to, orchard_agent_client::full(archive)).await.map_err(|e| format!("{uploading}: {e}"))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    //! On the in-process fake backend: what a Dockerfile's COPY, ADD, CMD and HEALTHCHECK put
    //! into a sandbox, without root or a real one.

    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use orchard_sandbox::{Backend, SandboxSpec};
    use orchard_sandbox_fake::{FakeBackend, exited};

    use super::*;

    fn task_dir(dockerfile: &str) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let t = dir.path().join("t");
        std::fs::create_dir_all(t.join("environment/conf")).unwrap();
        std::fs::write(t.join("instruction.md"), "do it").unwrap();
        std::fs::write(t.join("environment/Dockerfile"), dockerfile).unwrap();
        std::fs::write(t.join("environment/data.txt"), "rows").unwrap();
        std::fs::write(t.join("environment/conf/app.ini"), "[app]").unwrap();
        let mut archive = tar::Builder::new(Vec::new());
        let mut header = tar::Header::new_gnu();
        header.set_size(5);
        header.set_mode(0o644);
        archive.append_data(&mut header, "repo/README", &b"hello"[..]).unwrap();
        std::fs::write(t.join("environment/repo.tar"), archive.into_inner().unwrap()).unwrap();
        dir
    }

    #[tokio::test]
    async fn copies_archives_and_the_service_land_in_the_sandbox() {
        let dir = task_dir(
            "FROM x\nWORKDIR /app\nCOPY data.txt .\nCOPY conf /etc/conf\nADD repo.tar /work\n\
             CMD [\"serve\", \"--port\", \"80\"]\nHEALTHCHECK CMD probe\n",
        );
        let task = crate::load_tasks(&dir.path().join("t")).unwrap().remove(0);
        // The probe passes on its third try: the rollout waits for it.
        let probes = Arc::new(AtomicUsize::new(0));
        let seen = probes.clone();
        // HEALTHCHECK's shell form runs as `/bin/sh -c probe`.
        let backend = FakeBackend::new().with_exec(move |call| match call.line().as_str() {
            "/bin/sh -c probe" => exited(if seen.fetch_add(1, Ordering::SeqCst) >= 2 { 0 } else { 1 }, "", ""),
            line if line.contains("serve --port 80") => exited(0, "", ""),
            line => exited(127, "", &format!("{line}: unexpected")),
        });
        let info = backend.create(SandboxSpec::new("t", "host")).await.unwrap();
        let agent = backend.agent(&info.id).await.unwrap();
        prepare_environment(&*agent, &task).await.unwrap();
        let files = backend.files(&info.id).unwrap();
        assert_eq!(files.read("/app/data.txt").unwrap(), "rows");
        assert_eq!(files.read("/etc/conf/app.ini").unwrap(), "[app]");
        assert_eq!(files.read("/work/repo/README").unwrap(), "hello");
        assert_eq!(probes.load(Ordering::SeqCst), 3);
        let started = backend.commands(&info.id).unwrap();
        assert!(started[0].command.display().ends_with("sh serve --port 80"), "{:?}", started[0]);
    }

    #[tokio::test]
    async fn a_failing_copy_names_the_file_and_the_sandbox_refusal() {
        let dir = task_dir("FROM x\nCOPY data.txt /full/data.txt\n");
        let task = crate::load_tasks(&dir.path().join("t")).unwrap().remove(0);
        let backend = FakeBackend::new();
        let info = backend.create(SandboxSpec { disk_bytes: Some(2), ..SandboxSpec::new("t", "host") }).await.unwrap();
        let agent = backend.agent(&info.id).await.unwrap();
        let e = prepare_environment(&*agent, &task).await.unwrap_err();
        assert!(e.contains("COPY") && e.contains("data.txt") && e.contains("no space"), "{e}");
    }
}
