//! `GET /v1/evals/{id}/events`: server-sent events. `rollout` for each rollout as it finishes
//! (its row; the event id is its finish order, so a client reconnecting with `Last-Event-ID`
//! misses nothing), `counts` when the counts change, and `end` when nothing is left to run.
//! Read from the store, so they report the rollouts every replica finishes.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::Extension;
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::sse::{Event, KeepAlive, Sse};
use futures::Stream;

use crate::evals::{eval_view, owned};
use crate::{EvalService, Tenant};
use orchard_api_kit::ApiResult;

#[utoipa::path(get, path = "/v1/evals/{id}/events", tag = "evals", summary = "Server-sent events: rollout (each as it finishes; id = finish order, resumable with Last-Event-ID), counts, end", params(("id" = String, Path, description = "The evaluation id")), responses((status = 200, description = "An event stream", content_type = "text/event-stream", body = String), (status = "4XX", description = "Refused: the body names what was wrong", body = orchard_api_kit::Problem), (status = 503, description = "The database is unavailable", body = orchard_api_kit::Problem)))]
/// `GET /v1/evals/{id}/events`: results as they finish (server-sent events).
pub async fn stream(
    State(service): State<Arc<EvalService>>,
    Extension(tenant): Extension<Tenant>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> ApiResult<Sse<impl Stream<Item = Result<Event, Infallible>>>> {
    owned(&service, &tenant, &id).await?;
    let start: i64 =
        headers.get("last-event-id").and_then(|v| v.to_str().ok()).and_then(|v| v.parse().ok()).unwrap_or(0);
    let events = futures::stream::unfold(
        (service, id, start, None::<String>, false),
        |(service, id, mut cursor, mut last, ended)| async move {
            if ended {
                return None;
            }
            loop {
                let mut batch: Vec<Event> = Vec::new();
                // The job first, then what finished: every finish the job's counts include is
                // committed, so it is in the rows read after — an `end` never overtakes a
                // rollout.
                let eval = service.env.store.eval(&id).await.ok().flatten();
                if let Ok(rows) = service.env.store.finished_since(&id, cursor, 200).await {
                    let full = rows.len() == 200;
                    for row in rows {
                        cursor = row.finish_seq.unwrap_or(cursor);
                        let data = serde_json::to_string(&row).unwrap_or_default();
                        batch.push(Event::default().event("rollout").id(cursor.to_string()).data(data));
                    }
                    if full {
                        // More to read before the counts or the end can be told.
                        let stream = futures::stream::iter(batch.into_iter().map(Ok::<_, Infallible>));
                        return Some((stream, (service, id, cursor, last, false)));
                    }
                }
                let end;
                if let Some(e) = &eval {
                    let counts = eval_view(e)["counts"].to_string();
                    if last.as_deref() != Some(counts.as_str()) {
                        batch.push(
                            Event::default()
                                .event("counts")
                                .data(format!("{{\"status\":\"{}\",\"counts\":{counts}}}", e.status)),
                        );
                        last = Some(counts);
                    }
                    end = e.running == 0 && e.queued == 0 && matches!(e.status.as_str(), "done" | "cancelled");
                    if end {
                        batch.push(Event::default().event("end").data(format!("{{\"status\":\"{}\"}}", e.status)));
                    }
                } else {
                    end = true;
                }
                if !batch.is_empty() {
                    let stream = futures::stream::iter(batch.into_iter().map(Ok::<_, Infallible>));
                    return Some((stream, (service, id, cursor, last, end)));
                }
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
        },
    );
    // A client that loses the connection comes back within a second, with `Last-Event-ID`.
    let retry = futures::stream::once(async { Ok::<_, Infallible>(Event::default().retry(Duration::from_secs(1))) });
    use futures::StreamExt;
    Ok(Sse::new(retry.chain(events.flatten())).keep_alive(KeepAlive::new().interval(Duration::from_secs(15))))
}
