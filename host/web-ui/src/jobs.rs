//! The jobs list (live: its rows are fetched again every few seconds) and the new-job form.

use std::sync::Arc;

use askama::Template;
use axum::Form;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use orchard_scheduler::EvalSpec;
use orchard_store::{EvalFilter, EvalRow};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::format::{age, pct, percent_of};
use crate::{Layout, S, Signed, UiState, api_error, render};

pub struct JobRow {
    pub id: String,
    pub status: String,
    pub done: i64,
    pub total: i64,
    pub percent: i64,
    pub pass_rate: String,
    pub errored: i64,
    pub tenant: String,
    pub age: String,
    pub what: String,
}

impl JobRow {
    pub fn of(e: &EvalRow) -> JobRow {
        let spec: Value = serde_json::from_str(&e.spec).unwrap_or(Value::Null);
        let names = |v: &Value| {
            v.as_array().map(|a| a.iter().filter_map(Value::as_str).collect::<Vec<_>>().join(", ")).unwrap_or_default()
        };
        let tasks = match &spec["tasks"] {
            Value::Object(m) => m
                .iter()
                .next()
                .map(|(k, v)| {
                    let v = v.as_str().unwrap_or_default();
                    if k == "archive" { format!("upload {}", &v[..v.len().min(19)]) } else { v.to_string() }
                })
                .unwrap_or_default(),
            _ => String::new(),
        };
        let decided = e.graded;
        JobRow {
            id: e.id.clone(),
            status: e.status.clone(),
            done: e.done,
            total: e.total,
            percent: percent_of(e.done, e.total),
            pass_rate: pct((decided > 0).then(|| e.passed as f64 / decided as f64)),
            errored: e.errored,
            tenant: e.tenant.clone(),
            age: age(e.created_at),
            what: format!("{tasks} · {} · {}", names(&spec["harnesses"]), spec["grader"].as_str().unwrap_or_default()),
        }
    }
}

#[derive(Template)]
#[template(path = "jobs.html")]
struct JobsPage {
    layout: Layout,
    rows: Vec<JobRow>,
}

#[derive(Template)]
#[template(path = "jobs_rows.html")]
struct JobsRows {
    rows: Vec<JobRow>,
}

/// The tenant's latest jobs, newest first.
pub(crate) async fn recent(state: &UiState, signed: &Signed) -> Result<Vec<JobRow>, Response> {
    let filter = EvalFilter { status: None, before: None, limit: 100 };
    let rows = state.service.env.store.list_evals(&signed.tenant.0, &filter).await.map_err(|e| api_error(e.into()))?;
    Ok(rows.iter().map(JobRow::of).collect())
}

pub async fn page(State(state): S, signed: Signed) -> Response {
    match recent(&state, &signed).await {
        Ok(rows) => render(&JobsPage { layout: signed.layout("Jobs"), rows }),
        Err(r) => r,
    }
}

/// The table's rows alone, for the page's script to swap in.
pub async fn rows(State(state): S, signed: Signed) -> Response {
    match recent(&state, &signed).await {
        Ok(rows) => render(&JobsRows { rows }),
        Err(r) => r,
    }
}

#[derive(Template)]
#[template(path = "new.html")]
struct NewPage {
    layout: Layout,
    datasets: Vec<String>,
    form: NewForm,
    error: Option<String>,
}

#[derive(Deserialize, Clone)]
pub struct NewForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    dataset: String,
    #[serde(default)]
    harnesses: String,
    #[serde(default)]
    tools: String,
    #[serde(default)]
    grader: String,
    #[serde(default)]
    attempts: String,
    #[serde(default)]
    concurrency: String,
    #[serde(default)]
    grants: String,
    #[serde(default)]
    image: String,
    #[serde(default)]
    model_url: String,
    #[serde(default)]
    model_name: String,
    #[serde(default)]
    api_key_secret: String,
}

impl Default for NewForm {
    fn default() -> Self {
        NewForm {
            csrf: String::new(),
            dataset: String::new(),
            harnesses: "oracle".into(),
            tools: "shell".into(),
            grader: "script".into(),
            attempts: "1".into(),
            concurrency: "4".into(),
            grants: String::new(),
            image: "host".into(),
            model_url: String::new(),
            model_name: String::new(),
            api_key_secret: String::new(),
        }
    }
}

fn list(s: &str) -> Vec<String> {
    s.split([',', ' ']).map(str::trim).filter(|s| !s.is_empty()).map(str::to_string).collect()
}

impl NewForm {
    /// The job this form asks for, or what is wrong with it (naming the field).
    fn spec(&self) -> Result<EvalSpec, String> {
        let number = |field: &str, v: &str| -> Result<u64, String> {
            v.trim().parse::<u64>().map_err(|_| format!("{field}: {v:?} is not a whole number"))
        };
        if self.dataset.trim().is_empty() {
            return Err("dataset: choose the tasks to run".into());
        }
        let mut spec = json!({
            "tasks": {"dataset": self.dataset.trim()},
            "harnesses": list(&self.harnesses),
            "tools": list(&self.tools),
            "grader": self.grader.trim(),
            "attempts": number("attempts", &self.attempts)?,
            "concurrency": number("concurrency", &self.concurrency)?,
            "grants": list(&self.grants),
            "image": if self.image.trim().is_empty() { "host" } else { self.image.trim() },
        });
        if !self.model_url.trim().is_empty() {
            let mut model = json!({"url": self.model_url.trim(), "name": self.model_name.trim()});
            if !self.api_key_secret.trim().is_empty() {
                model["api_key_secret"] = json!(self.api_key_secret.trim());
            }
            spec["model"] = model;
        }
        serde_json::from_value(spec).map_err(|e| e.to_string())
    }
}

fn dataset_names(state: &UiState) -> Vec<String> {
    state.service.env.datasets.keys().cloned().collect()
}

pub async fn new_page(State(state): S, signed: Signed) -> Response {
    let mut form = NewForm::default();
    let datasets = dataset_names(&state);
    form.dataset = datasets.first().cloned().unwrap_or_default();
    render(&NewPage { layout: signed.layout("New job"), datasets, form, error: None })
}

pub async fn submit(
    State(state): State<Arc<UiState>>,
    signed: Signed,
    headers: HeaderMap,
    Form(form): Form<NewForm>,
) -> Response {
    if let Err(r) = signed.check_csrf(&state, &headers, &form.csrf) {
        return r;
    }
    let refused = |error: String| {
        let page = NewPage {
            layout: signed.layout("New job"),
            datasets: dataset_names(&state),
            form: form.clone(),
            error: Some(error),
        };
        (StatusCode::UNPROCESSABLE_ENTITY, render(&page)).into_response()
    };
    let spec = match form.spec() {
        Ok(spec) => spec,
        Err(e) => return refused(e),
    };
    match orchard_evals_api::submit_spec(&state.service, &signed.tenant, spec).await {
        Ok(row) => Redirect::to(&format!("/ui/evals/{}", row.id)).into_response(),
        Err(e) if e.status.is_client_error() => refused(e.detail),
        Err(e) => api_error(e),
    }
}
