//! `GET /api/components`: every loaded component and every file that failed.

use axum::extract::State;
use axum::Json;
use serde_json::{json, Value};

use super::AppState;

pub async fn list(State(state): State<AppState>) -> Json<Value> {
    let components: Vec<Value> = state
        .registry
        .components()
        .iter()
        .map(|c| c.describe_json())
        .collect();
    Json(json!({"components": components, "failures": state.registry.failures()}))
}
