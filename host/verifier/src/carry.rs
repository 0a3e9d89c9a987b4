//! Reading the agent's change out of its sandbox and applying it in the verifier's.

use orchard_agent_client::SandboxAgent;
use orchard_protocol::{ExecRequest, ExecResult};

use crate::{CarryReport, CarrySpec, Dropped, MAX_CARRY_BYTES, RepoCarry, VerifierError, policy};

/// What was read from the agent's sandbox.
#[derive(Debug, Default)]
pub struct Extracted {
    /// The agent's diff against the base, or why it could not be read.
    pub diff: Option<Result<Vec<u8>, String>>,
    /// Artifacts as tar archives of their parent directory's entry: (path, archive).
    pub artifacts: Vec<(String, Vec<u8>)>,
    /// Artifacts that could not be read, and why.
    pub missing: Vec<Dropped>,
}

fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

async fn sh(agent: &dyn SandboxAgent, script: &str, cwd: Option<&str>, timeout_s: u64) -> Result<ExecResult, String> {
    let mut req = ExecRequest::argv(["bash", "-c", script]);
    req.cwd = cwd.map(str::to_string);
    req.timeout_ms = Some(timeout_s * 1000);
    agent.exec(&req).await.map_err(|e| e.to_string())
}

fn failed(what: &str, r: &ExecResult) -> String {
    let tail: String = format!("{}{}", r.stdout.text, r.stderr.text).trim().chars().rev().take(300).collect();
    format!("{what} failed (exit {}): {}", r.exit_code, tail.chars().rev().collect::<String>())
}

/// Runs `script` with `$OUT` naming a fresh file, and reads that file back (at most
/// [`MAX_CARRY_BYTES`]); the file is removed.
async fn produce(agent: &dyn SandboxAgent, script: &str, cwd: Option<&str>, what: &str) -> Result<Vec<u8>, String> {
    let out = format!("/tmp/orchard-carry-{}", uuid::Uuid::new_v4().simple());
    let mut req = ExecRequest::argv(["bash", "-c", script]);
    req.cwd = cwd.map(str::to_string);
    req.timeout_ms = Some(300_000);
    req.env.insert("OUT".into(), out.clone());
    let r = agent.exec(&req).await.map_err(|e| e.to_string())?;
    let read = async {
        if r.exit_code != 0 {
            return Err(failed(what, &r));
        }
        let size = agent.stat(&out).await.map_err(|e| format!("{what}: {e}"))?.size;
        if size > MAX_CARRY_BYTES {
            return Err(format!("{what}: {size} bytes, over the {MAX_CARRY_BYTES} the verifier carries"));
        }
        agent.read_file(&out).await.map(|b| b.to_vec()).map_err(|e| format!("{what}: {e}"))
    };
    let result = read.await;
    let _ = agent.remove(&out, false).await;
    result
}

/// The agent's change to `repo` against `base`: every tracked and untracked (not ignored) file,
/// binary included, as `git diff` writes it. The agent's own git runs here: what it prints is
/// only ever a claim, applied and checked by the verifier's git.
pub async fn extract_diff(agent: &dyn SandboxAgent, repo: &RepoCarry, base: &str) -> Result<Vec<u8>, String> {
    let script = format!(
        "set -e; export GIT_INDEX_FILE=\"$OUT.index\"; git read-tree {base}; git add -A; \
         git -c core.quotepath=off diff --cached --binary --full-index --no-ext-diff --no-textconv --no-color \
         --no-renames {base} > \"$OUT\"; rm -f \"$GIT_INDEX_FILE\"",
        base = quote(base),
    );
    produce(agent, &script, Some(&repo.dir), "the agent's change (git diff in its sandbox)").await
}

/// Reads what `spec` carries out of the agent's sandbox (before it goes).
pub async fn extract_artifacts(agent: &dyn SandboxAgent, spec: &CarrySpec, extracted: &mut Extracted) {
    let mut total = 0u64;
    for path in &spec.artifacts {
        let script = format!(
            "set -e; p={p}; test -e \"$p\" || {{ echo 'no such file or directory' >&2; exit 3; }}; \
             tar -C \"$(dirname \"$p\")\" -cf \"$OUT\" \"$(basename \"$p\")\"",
            p = quote(path)
        );
        match produce(agent, &script, None, path).await {
            Ok(bytes) if total + bytes.len() as u64 <= MAX_CARRY_BYTES => {
                total += bytes.len() as u64;
                extracted.artifacts.push((path.clone(), bytes));
            }
            Ok(bytes) => extracted.missing.push(Dropped {
                path: path.clone(),
                reason: format!("{} bytes more than the {MAX_CARRY_BYTES} the verifier carries", bytes.len()),
            }),
            Err(reason) => extracted.missing.push(Dropped { path: path.clone(), reason }),
        }
    }
}

/// Puts what was extracted into the verifier's clean sandbox, enforcing the repository's drop
/// policy with the verifier's own git, and says what it did.
pub async fn carry(
    verifier: &dyn SandboxAgent,
    spec: &CarrySpec,
    base: Option<&str>,
    extracted: Extracted,
) -> Result<CarryReport, VerifierError> {
    let mut report = CarryReport { base_commit: base.map(str::to_string), ..Default::default() };
    report.dropped.extend(extracted.missing);
    if let (Some(repo), Some(diff)) = (&spec.repo, extracted.diff) {
        match diff {
            Err(problem) => report.problem = Some(problem),
            Ok(diff) => {
                report.diff_bytes = diff.len() as u64;
                if !diff.is_empty() {
                    apply_repo_change(verifier, repo, base.unwrap_or("HEAD"), diff, &mut report).await?;
                }
            }
        }
    }
    for (path, archive) in extracted.artifacts {
        let parent = std::path::Path::new(&path).parent().map(|p| p.display().to_string()).unwrap_or("/".into());
        verifier
            .tar_upload(&parent, orchard_agent_client::full(archive))
            .await
            .map_err(|e| VerifierError::Sandbox(format!("carrying {path}: {e}")))?;
        report.artifacts.push(path);
    }
    Ok(report)
}

async fn apply_repo_change(
    verifier: &dyn SandboxAgent,
    repo: &RepoCarry,
    base: &str,
    diff: Vec<u8>,
    report: &mut CarryReport,
) -> Result<(), VerifierError> {
    let err = |e: String| VerifierError::Sandbox(e);
    let nonce = uuid::Uuid::new_v4().simple().to_string();
    let patch = format!("/tmp/orchard-carry-{nonce}.diff");
    verifier.write_file(&patch, orchard_agent_client::full(diff), None, true).await.map_err(|e| err(e.to_string()))?;
    let apply =
        sh(verifier, &format!("git apply --binary --whitespace=nowarn {}", quote(&patch)), Some(&repo.dir), 300)
            .await
            .map_err(err)?;
    let _ = verifier.remove(&patch, false).await;
    if apply.exit_code != 0 {
        // Nothing of a change that does not apply as a whole is carried (git apply is atomic).
        report.problem = Some(failed("applying the agent's change to a clean checkout", &apply));
        return Ok(());
    }
    // What changed, according to the verifier's git (not the diff's own headers).
    let index = format!("/tmp/orchard-carry-{nonce}.index");
    let list = sh(
        verifier,
        &format!(
            "set -e; export GIT_INDEX_FILE={i}; git read-tree {b}; git add -A; git diff --cached --name-status -z --no-renames {b}; rm -f {i}",
            i = quote(&index),
            b = quote(base)
        ),
        Some(&repo.dir),
        300,
    )
    .await
    .map_err(err)?;
    if list.exit_code != 0 || list.stdout.truncated {
        return Err(err(failed("listing the carried change", &list)));
    }
    let fields: Vec<&str> = list.stdout.text.split('\0').filter(|f| !f.is_empty()).collect();
    let changes: Vec<(&str, &str)> = fields.chunks(2).filter(|c| c.len() == 2).map(|c| (c[0], c[1])).collect();
    let mut revert: Vec<(&str, bool)> = Vec::new();
    for (status, path) in changes {
        let reason = if !repo.drop_test_changes || repo.keep.contains(path) {
            None
        } else if let Some(r) = policy::machinery_by_path(path) {
            Some(r.to_string())
        } else if let Some(r) = policy::test_file(path) {
            Some(r.to_string())
        } else if policy::has_test_sections(path) {
            let before = read_at(verifier, &repo.dir, base, path).await?;
            let after = if status == "D" { None } else { read_now(verifier, &repo.dir, path).await? };
            policy::test_sections_changed(path, before.as_deref(), after.as_deref())
                .then(|| "changes a test section of a shared configuration file".to_string())
        } else {
            None
        };
        match reason {
            Some(reason) => {
                revert.push((path, status != "A"));
                report.dropped.push(Dropped { path: path.to_string(), reason });
            }
            None => report.carried.push(path.to_string()),
        }
    }
    if !revert.is_empty() {
        let mut script = String::from("set -e; ");
        for (path, existed) in &revert {
            if *existed {
                script.push_str(&format!("git checkout -q {} -- {}; ", quote(base), quote(path)));
            } else {
                script.push_str(&format!("rm -rf -- {}; ", quote(path)));
            }
        }
        let r = sh(verifier, &script, Some(&repo.dir), 300).await.map_err(err)?;
        if r.exit_code != 0 {
            return Err(err(failed("dropping test changes", &r)));
        }
    }
    Ok(())
}

/// A file as it is at `base` in the verifier's repository (`None`: it did not exist).
async fn read_at(
    verifier: &dyn SandboxAgent,
    dir: &str,
    base: &str,
    path: &str,
) -> Result<Option<String>, VerifierError> {
    let object = quote(&format!("{base}:{path}"));
    let exists =
        sh(verifier, &format!("git cat-file -e {object}"), Some(dir), 60).await.map_err(VerifierError::Sandbox)?;
    if exists.exit_code != 0 {
        return Ok(None);
    }
    let bytes = produce(verifier, &format!("git show {object} > \"$OUT\""), Some(dir), path)
        .await
        .map_err(VerifierError::Sandbox)?;
    Ok(Some(String::from_utf8_lossy(&bytes).into_owned()))
}

async fn read_now(verifier: &dyn SandboxAgent, dir: &str, path: &str) -> Result<Option<String>, VerifierError> {
    let full = format!("{}/{}", dir.trim_end_matches('/'), path);
    match verifier.read_file(&full).await {
        Ok(bytes) => Ok(Some(String::from_utf8_lossy(&bytes).into_owned())),
        Err(e) if e.kind() == orchard_protocol::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(VerifierError::Sandbox(format!("reading {full}: {e}"))),
    }
}
