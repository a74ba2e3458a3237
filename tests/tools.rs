//! Tool calls executed inside the `weather` component, and structured output.

use serde_json::{json, Value};

use crate::support::{client, FakeModel, HostBuilder, Reply};

#[tokio::test(flavor = "multi_thread")]
async fn a_tool_call_runs_in_the_component_and_its_result_goes_back_to_the_model() {
    let dir = tempfile::tempdir().unwrap();
    let model = FakeModel::start().await;
    model.push(Reply::ToolCall(
        "get_weather".into(),
        json!({"city": "Paris"}),
    ));
    model.push(Reply::Text("It is mild in Paris.".into()));
    let host = HostBuilder::new(dir.path())
        .openai(&model, "sk-test")
        .start();
    let response = client()
        .post(host.url("/api/agents/weather/run"))
        .body("Weather in Paris?")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.text().await.unwrap(), "It is mild in Paris.");

    let requests = model.requests();
    assert_eq!(requests.len(), 2);
    // The model was offered the tool with the schema derived from the Rust type.
    let tool = &requests[0].body["tools"][0];
    assert_eq!(tool["type"], "function");
    assert_eq!(tool["function"]["name"], "get_weather");
    assert_eq!(
        tool["function"]["parameters"]["properties"]["city"]["type"],
        "string"
    );
    assert_eq!(tool["function"]["parameters"]["required"], json!(["city"]));
    // The second call carries the assistant's tool call and the component's result.
    let messages = requests[1].messages();
    let call = &messages[messages.len() - 2];
    assert_eq!(call["tool_calls"][0]["function"]["name"], "get_weather");
    let result = &messages[messages.len() - 1];
    assert_eq!(result["role"], "tool");
    assert_eq!(result["tool_call_id"], "call_get_weather");
    let weather: Value = serde_json::from_str(result["content"].as_str().unwrap()).unwrap();
    assert_eq!(weather["city"], "Paris");
    assert!(weather["temperature_c"].is_i64());
    assert!(["sunny", "cloudy", "rainy", "windy", "snowy"]
        .contains(&weather["conditions"].as_str().unwrap()));

    // The same city always gets the same weather (the component is deterministic).
    model.push(Reply::ToolCall(
        "get_weather".into(),
        json!({"city": "Paris"}),
    ));
    model.push(Reply::Text("again".into()));
    client()
        .post(host.url("/api/agents/weather/run"))
        .body("And now?")
        .send()
        .await
        .unwrap();
    let again = model.requests()[3].messages();
    assert_eq!(again.last().unwrap()["content"], result["content"]);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failing_tool_is_reported_to_the_model_not_to_the_caller() {
    let dir = tempfile::tempdir().unwrap();
    let model = FakeModel::start().await;
    model.push(Reply::ToolCall(
        "get_weather".into(),
        json!({"town": "Paris"}),
    ));
    model.push(Reply::ToolCall("launch_rockets".into(), json!({})));
    model.push(Reply::Text("Sorry.".into()));
    let host = HostBuilder::new(dir.path())
        .openai(&model, "sk-test")
        .start();
    let response = client()
        .post(host.url("/api/agents/weather/run"))
        .body("?")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let requests = model.requests();
    let bad_args = requests[1].messages().last().unwrap()["content"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        bad_args.contains("invalid arguments") && bad_args.contains("city"),
        "{bad_args}"
    );
    let unknown = requests[2].messages().last().unwrap()["content"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        unknown.contains("no tool named 'launch_rockets'"),
        "{unknown}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn response_format_is_sent_to_the_model_and_the_answer_returned_as_json() {
    let dir = tempfile::tempdir().unwrap();
    let model = FakeModel::start().await;
    model.push(Reply::Text(
        r#"{"is_spam": true, "confidence": 0.93, "reason": "lottery"}"#.into(),
    ));
    let host = HostBuilder::new(dir.path())
        .openai(&model, "sk-test")
        .start();
    let schema = json!({
        "type": "object",
        "properties": {"is_spam": {"type": "boolean"}, "confidence": {"type": "number"}, "reason": {"type": "string"}},
        "required": ["is_spam", "confidence", "reason"]
    });
    let response = client()
        .post(host.url("/api/agents/writer/run"))
        .header("accept", "application/json")
        .json(&json!({"message": "You won!", "response_format": schema}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.unwrap();
    assert_eq!(
        body["response"],
        json!({"is_spam": true, "confidence": 0.93, "reason": "lottery"})
    );
    let sent = &model.requests()[0].body["response_format"];
    assert_eq!(sent["type"], "json_schema");
    assert_eq!(sent["json_schema"]["schema"], schema);

    // An answer that is not JSON fails the run with 502 rather than passing garbage on.
    model.push(Reply::Text("not json".into()));
    let bad = client()
        .post(host.url("/api/agents/writer/run"))
        .json(&json!({"message": "again", "response_format": schema}))
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status(), 502);
    assert_eq!(
        bad.json::<Value>().await.unwrap()["code"],
        "invalid_structured_output"
    );
}
