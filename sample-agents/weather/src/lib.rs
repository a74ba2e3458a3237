//! `weather`: an agent with one tool, `get_weather`, that reports deterministic
//! conditions for a city (no network: the point is the tool round trip).

use agenthost_guest::{Agent, Approval, Component, Tool};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Arguments of `get_weather`.
#[derive(Deserialize, JsonSchema)]
struct WeatherQuery {
    /// Name of the city, e.g. "Paris".
    city: String,
}

/// What `get_weather` returns to the model.
#[derive(Serialize)]
struct Weather {
    city: String,
    temperature_c: i32,
    conditions: &'static str,
}

const CONDITIONS: [&str; 5] = ["sunny", "cloudy", "rainy", "windy", "snowy"];

/// The same city always gets the same weather, so answers can be checked.
fn get_weather(query: WeatherQuery) -> Result<Weather, String> {
    let city = query.city.trim();
    if city.is_empty() {
        return Err("city must not be empty".into());
    }
    let hash = city
        .to_lowercase()
        .bytes()
        .fold(0u32, |h, b| h.wrapping_mul(31).wrapping_add(u32::from(b)));
    let index = usize::try_from(hash % 5).unwrap_or(0);
    Ok(Weather {
        city: city.to_string(),
        temperature_c: i32::try_from(hash % 35).unwrap_or(0) - 5,
        conditions: CONDITIONS[index],
    })
}

fn component() -> Component {
    Component::new()
        .agent(
            Agent::new("weather")
                .description("Answers questions about the current weather")
                .instructions(
                    "You answer questions about the weather. Always call get_weather for the \
                     city the user asks about and report its temperature and conditions.",
                )
                .tool("get_weather"),
        )
        .tool(
            Tool::new("get_weather", "Current weather for a city", get_weather)
                .approval(Approval::NeverRequire),
        )
}

agenthost_guest::export!(component);
