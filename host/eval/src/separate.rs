//! Grading in a separate verifier environment: a fresh sandbox from the task's image, prepared
//! as the agent's was, into which only what the task declares is carried (`orchard-verifier`).

use orchard_agent_client::{SandboxAgent, SharedAgent};
use orchard_runtime::Plugin;
use orchard_sandbox::{Backend, SandboxSpec};
use orchard_verifier::{CarryReport, CarrySpec, Extracted, Mode, RepoCarry};

use crate::task::Task;

/// Where `task` is graded under `grader`: the task's `[verifier] environment_mode`, else the
/// grader's default (its manifest's `[verifier] environment`), else in place (Harbor's default).
pub fn mode_for(task: &Task, grader: &Plugin) -> Mode {
    task.verifier_mode.unwrap_or_else(|| {
        match grader.manifest.verifier.as_ref().and_then(|v| v.environment.as_deref()) {
            Some("separate") => Mode::Separate,
            _ => Mode::InPlace,
        }
    })
}

/// What `task`'s verifier carries into a sandbox of its own (`None`: it grades in the agent's),
/// as `grader` and the task say; an error when it would have to and could carry nothing.
pub fn carry_for(task: &Task, grader: &Plugin) -> Result<Option<CarrySpec>, String> {
    match mode_for(task, grader) {
        Mode::Separate => carry_spec(task, grader).map(Some),
        Mode::InPlace => Ok(None),
    }
}

/// What a separate verifier carries for `task`; an error when it would carry nothing.
pub fn carry_spec(task: &Task, grader: &Plugin) -> Result<CarrySpec, String> {
    let drop_test_changes = grader.manifest.verifier.as_ref().is_some_and(|v| v.drop_test_changes);
    let repo = task.verifier_repo_dir.as_ref().map(|dir| RepoCarry {
        dir: dir.clone(),
        base_commit: task.metadata.pointer("/metadata/base_commit").and_then(|v| v.as_str()).map(str::to_string),
        drop_test_changes,
        keep: task.gold_files.clone(),
    });
    if repo.is_none() && task.verifier_artifacts.is_empty() {
        return Err(format!(
            "task {}: grading in a separate verifier environment (by {}), but the task declares nothing to carry \
             into it: name the repository ([metadata] repo_dir, with base_commit) or [verifier] artifacts, or \
             choose [verifier] environment_mode = \"in-place\"",
            task.id,
            if task.verifier_mode.is_some() {
                "the task's [verifier] environment_mode".to_string()
            } else {
                format!("default of the grader {}", grader.id())
            }
        ));
    }
    Ok(CarrySpec { repo, artifacts: task.verifier_artifacts.clone() })
}

/// The verifier's sandbox, while it exists.
pub struct VerifierSandbox {
    pub id: String,
    pub client: SharedAgent,
}

/// The id of the verifier's sandbox beside an agent's sandbox id (known in advance, so that a
/// cancelled rollout's verifier can be found and deleted too).
pub fn verifier_id(agent_sandbox_id: &str) -> String {
    format!("{agent_sandbox_id}-v")
}

/// Creates the verifier's sandbox from `spec` (the agent's, with its own id), prepares it as
/// the agent's was and carries the agent's change into it. On an error the sandbox is deleted.
pub async fn prepare(
    backend: &dyn Backend,
    mut spec: SandboxSpec,
    agent: &dyn SandboxAgent,
    task: &Task,
    carry: &CarrySpec,
) -> Result<(VerifierSandbox, CarryReport), String> {
    spec.id = spec.id.as_deref().map(verifier_id);
    let info = backend.create(spec).await.map_err(|e| format!("verifier sandbox: {e}"))?;
    let prepared = async {
        let client = backend.agent(&info.id).await.map_err(|e| format!("verifier sandbox: {e}"))?;
        crate::environment::prepare_environment(&*client, task).await?;
        // The base: the task's, else what the clean checkout has at HEAD.
        let base = match carry.repo.as_ref() {
            Some(RepoCarry { base_commit: Some(b), .. }) => Some(b.clone()),
            Some(repo) => head_of(&*client, &repo.dir).await,
            None => None,
        };
        let mut extracted = Extracted::default();
        if let Some(repo) = &carry.repo {
            extracted.diff = Some(match &base {
                Some(base) => orchard_verifier::extract_diff(agent, repo, base).await,
                None => Err(format!("the clean sandbox has no git repository at {}", repo.dir)),
            });
        }
        orchard_verifier::extract_artifacts(agent, carry, &mut extracted).await;
        let report =
            orchard_verifier::carry(&*client, carry, base.as_deref(), extracted).await.map_err(|e| e.to_string())?;
        Ok::<_, String>((client, report))
    };
    match prepared.await {
        Ok((client, report)) => Ok((VerifierSandbox { id: info.id, client }, report)),
        Err(e) => {
            let _ = backend.delete(&info.id).await;
            Err(e)
        }
    }
}

async fn head_of(client: &dyn SandboxAgent, dir: &str) -> Option<String> {
    let mut req = orchard_protocol::ExecRequest::argv(["git", "rev-parse", "--verify", "HEAD"]);
    req.cwd = Some(dir.to_string());
    let r = client.exec(&req).await.ok()?;
    let head = r.stdout.text.trim();
    (r.exit_code == 0 && !head.is_empty()).then(|| head.to_string())
}
