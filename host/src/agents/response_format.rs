//! `response_format` as callers send it, turned into what the model API takes.

use serde_json::{json, Value};

/// Accepts an OpenAI `response_format` object (`{"type": "json_schema", …}`,
/// `{"type": "json_object"}`, `{"type": "text"}`) or a bare JSON Schema, which
/// is wrapped as a `json_schema` format named `response`.
pub fn normalize(value: Value) -> Result<Option<Value>, String> {
    let Value::Object(ref object) = value else {
        return Err(
            "response_format must be a JSON object (a JSON Schema or an OpenAI response_format)"
                .into(),
        );
    };
    match object.get("type").and_then(Value::as_str) {
        Some("text") => Ok(None),
        Some("json_object") => Ok(Some(value)),
        Some("json_schema") => match object.get("json_schema") {
            Some(inner) if inner.get("schema").is_some_and(Value::is_object) => Ok(Some(value)),
            _ => Err(
                "response_format of type json_schema needs json_schema.schema to be an object"
                    .into(),
            ),
        },
        _ => Ok(Some(json!({
            "type": "json_schema",
            "json_schema": {"name": "response", "schema": value},
        }))),
    }
}

/// True when the answer must parse as JSON.
pub fn wants_json(format: &Value) -> bool {
    matches!(
        format.get("type").and_then(Value::as_str),
        Some("json_schema" | "json_object")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bare_schema_is_wrapped() -> Result<(), String> {
        let schema = json!({"type": "object", "properties": {"a": {"type": "string"}}});
        let format = normalize(schema.clone())?.ok_or("a JSON Schema gives a response_format")?;
        assert_eq!(format["type"], "json_schema");
        assert_eq!(format["json_schema"]["schema"], schema);
        assert!(wants_json(&format));
        Ok(())
    }

    #[test]
    fn openai_formats_pass_through_and_text_means_none() -> Result<(), String> {
        let f = json!({"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object"}}});
        assert_eq!(normalize(f.clone())?, Some(f));
        assert_eq!(normalize(json!({"type": "text"}))?, None);
        assert!(normalize(json!("nope")).is_err());
        assert!(normalize(json!({"type": "json_schema"})).is_err());
        Ok(())
    }
}
