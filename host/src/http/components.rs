//! `GET /api/components`: every loaded component and every file that
//! failed; `GET /api/components/{name}`: one component, with the last
//! replay check of its version against the instances of older ones.

use axum::extract::{Path, State};
use axum::Json;
use serde_json::{json, Value};

use super::error::ApiError;
use super::AppState;

/// A component whose newer file failed to load still serves its previous
/// version; its entry carries the error so operators see both facts at once.
/// Each entry also lists the versions of that component instances not ended
/// still run on (`versions_in_use`: digest, instances, whether it is the one
/// served); versions of components no longer served are in the top-level
/// `versions_in_use`. Those counts need the store: if it cannot be read the
/// components are listed all the same, with `versions_error`.
#[utoipa::path(
    get,
    path = "/api/components",
    tag = "operations",
    responses(
        (status = 200, description = "`{components: [...], failures: [...], versions_in_use: [...]}`", body = Object),
        super::schemas::Failures
    )
)]
pub async fn list(State(state): State<AppState>) -> Json<Value> {
    let failures = state.registry.failures();
    let served = state.registry.components();
    let (in_use, versions_error) = match state.orchestrator.versions_in_use().await {
        Ok(in_use) => (in_use, None),
        Err(e) => {
            tracing::warn!(error = %e, "could not count the component versions in use");
            (Vec::new(), Some(e.to_string()))
        }
    };
    let version = |v: &crate::durable::VersionInUse, current: Option<&str>| json!({"digest": v.digest, "instances": v.instances, "served": current == Some(v.digest.as_str())});
    let components: Vec<Value> = served
        .iter()
        .map(|c| {
            let mut described = c.describe_json();
            if let Some(failure) = failures.iter().find(|f| f.file == c.path) {
                described["load_error"] = json!(failure.error);
            }
            described["versions_in_use"] = in_use
                .iter()
                .filter(|v| v.name == c.name)
                .map(|v| version(v, Some(&c.digest)))
                .collect();
            described["replay_check"] = replay_check(&state, &c.name, false);
            described
        })
        .collect();
    let gone: Vec<Value> = in_use
        .iter()
        .filter(|v| !served.iter().any(|c| c.name == v.name))
        .map(|v| {
            let mut entry = version(v, None);
            entry["name"] = json!(v.name);
            entry
        })
        .collect();
    let mut body = json!({"components": components, "failures": failures, "versions_in_use": gone});
    if let Some(error) = versions_error {
        body["versions_error"] = json!(error);
    }
    Json(body)
}

/// The last replay check of `name`'s served version (`null`: none ran on
/// this host), its divergences listed only when `whole`.
fn replay_check(state: &AppState, name: &str, whole: bool) -> Value {
    let Some(report) = state.orchestrator.replay_check(name) else {
        return Value::Null;
    };
    let mut value = serde_json::to_value(&report).unwrap_or(Value::Null);
    if !whole {
        if let Some(fields) = value.as_object_mut() {
            fields.remove("divergences");
        }
    }
    value
}

/// One served component as `GET /api/components` lists it, with the last
/// replay check of its version in whole (`replay_check`: tally,
/// divergences with the first divergent step of each), or 404.
#[utoipa::path(
    get,
    path = "/api/components/{name}",
    tag = "operations",
    params(("name" = String, Path, description = "The component's name (its file stem)")),
    responses(
        (status = 200, description = "The component, its `versions_in_use` and its `replay_check`", body = Object),
        super::schemas::Failures
    )
)]
pub async fn get(
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let Some(component) = state
        .registry
        .components()
        .into_iter()
        .find(|c| c.name == name)
    else {
        // The name as asked, cut: it is the caller's text.
        let asked: String = name.chars().take(100).collect();
        return Err(ApiError::not_found(
            "unknown_component",
            format!("no component '{asked}' is served; GET /api/components lists them"),
        ));
    };
    let mut described = component.describe_json();
    if let Some(failure) = state
        .registry
        .failures()
        .into_iter()
        .find(|f| f.file == component.path)
    {
        described["load_error"] = json!(failure.error);
    }
    match state.orchestrator.versions_in_use().await {
        Ok(in_use) => {
            described["versions_in_use"] = in_use
                .iter()
                .filter(|v| v.name == component.name)
                .map(|v| json!({"digest": v.digest, "instances": v.instances, "served": v.digest == component.digest}))
                .collect();
        }
        Err(e) => described["versions_error"] = json!(e.to_string()),
    }
    described["replay_check"] = replay_check(&state, &component.name, true);
    Ok(Json(described))
}
