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

/// Errors shown for an answer at most: enough to repair it, short enough
/// for a model's prompt and an error body.
const MAX_ERRORS: usize = 5;

/// Checks an answer against the format: JSON at all, then against the
/// schema of a `json_schema` format. `Err` lists what is wrong, each with
/// where (a JSON pointer into the answer).
pub fn check(format: &Value, answer: &str) -> Result<(), Vec<String>> {
    if !wants_json(format) {
        return Ok(());
    }
    let value: Value =
        serde_json::from_str(answer).map_err(|e| vec![format!("the answer is not JSON: {e}")])?;
    let Some(schema) = format.get("json_schema").and_then(|j| j.get("schema")) else {
        return Ok(());
    };
    let validator = jsonschema::validator_for(schema)
        .map_err(|e| vec![format!("the response schema itself is not valid: {e}")])?;
    let errors: Vec<String> = validator
        .iter_errors(&value)
        .take(MAX_ERRORS)
        .map(|e| {
            let at = e.instance_path().to_string();
            let at = if at.is_empty() { "/".to_string() } else { at };
            format!("at {at}: {e}")
        })
        .collect();
    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors)
    }
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
    fn answers_are_checked_against_the_schema_with_where_they_fail() -> Result<(), String> {
        let format = normalize(json!({
            "type": "object",
            "properties": {"is_spam": {"type": "boolean"}, "confidence": {"type": "number"}},
            "required": ["is_spam", "confidence"],
        }))?
        .ok_or("a format")?;
        assert_eq!(
            check(&format, r#"{"is_spam": true, "confidence": 0.9}"#),
            Ok(())
        );
        let missing = check(&format, r#"{"is_spam": true}"#)
            .err()
            .ok_or("invalid")?;
        assert!(missing[0].contains("confidence"), "{missing:?}");
        let wrong = check(&format, r#"{"is_spam": "yes", "confidence": 1}"#)
            .err()
            .ok_or("invalid")?;
        assert!(wrong[0].starts_with("at /is_spam"), "{wrong:?}");
        let prose = check(&format, "Sure! It is spam.").err().ok_or("invalid")?;
        assert!(prose[0].contains("not JSON"), "{prose:?}");
        assert_eq!(check(&json!({"type": "json_object"}), "{}"), Ok(()));
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
