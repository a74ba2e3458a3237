// `weather`, in JavaScript: an agent with one tool, `get_weather`, that
// reports deterministic conditions for a city (no network: the point is the
// tool round trip). The twin of sample-agents/weather (Rust); both give the
// same answers.

import { Agent, Approval, Component, Tool, ToolError, exportComponent } from '../../../guests/js/agenthost.js';

const CONDITIONS = ['sunny', 'cloudy', 'rainy', 'windy', 'snowy'];

/** The same city always gets the same weather, so answers can be checked. */
function getWeather({ city }) {
  city = city.trim();
  if (!city) throw new ToolError('city must not be empty');
  let h = 0;
  for (const b of new TextEncoder().encode(city.toLowerCase())) {
    h = (Math.imul(h, 31) + b) >>> 0;
  }
  return { city, temperature_c: (h % 35) - 5, conditions: CONDITIONS[h % 5] };
}

const app = new Component()
  .agent(
    new Agent('weather')
      .description('Answers questions about the current weather')
      .instructions(
        'You answer questions about the weather. Always call get_weather for the ' +
          'city the user asks about and report its temperature and conditions.',
      )
      .tool('get_weather'),
  )
  .tool(
    new Tool(
      'get_weather',
      'Current weather for a city',
      {
        type: 'object',
        properties: { city: { type: 'string', description: 'Name of the city, e.g. "Paris".' } },
        required: ['city'],
      },
      getWeather,
    ).approval(Approval.NEVER_REQUIRE),
  );

export const { component, agentSettings, orchestrationInputs } = exportComponent(app);
