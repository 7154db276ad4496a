// tests/server/client.mjs - the official `openai` npm client against `moestream serve`.
//
// usage: node tests/server/client.mjs NODE_DIR BASE_URL API_KEY MODEL
//   NODE_DIR  where `npm ci` installed tests/server/package-lock.json (the pinned openai)
//   BASE_URL  e.g. http://127.0.0.1:PORT/v1
// Checks, each counted: models.list; a non-streamed and a streamed chat completion with the
// same seed give the same text, finish reason and usage; a completion (streamed == not);
// stop strings; thinking (reasoning_content apart from content, streamed == not); a
// tool-call round trip (forced tool_choice -> tool_calls -> tool result -> answer that
// resumes from the kept state: cached_tokens; the same answer from a cold state);
// errors surface as the SDK's typed errors (unknown model 404, wrong key 401, bad
// parameter 400); an aborted stream leaves the server serving.
// Last line: "client: N passed, N failed".
import { createRequire } from 'node:module';
import path from 'node:path';

const [nodeDir, baseURL, apiKey, model] = process.argv.slice(2);
const require = createRequire(path.join(path.resolve(nodeDir), 'package.json'));
const OpenAI = require('openai');

let pass = 0, fail = 0;
function check(cond, what, extra) {
    if (cond) pass++;
    else { fail++; console.log(`FAIL: ${what}${extra !== undefined ? ': ' + JSON.stringify(extra).slice(0, 600) : ''}`); }
}
async function step(name, fn) {
    try { await fn(); } catch (e) { fail++; console.log(`FAIL: ${name} threw ${e && e.stack ? e.stack.split('\n').slice(0, 3).join(' | ') : e}`); }
}

const client = new OpenAI({ baseURL, apiKey, maxRetries: 0, timeout: 60000 });
const user = (content) => ({ role: 'user', content });

// the concatenated deltas of a chat stream
async function collectChat(stream) {
    const out = { content: '', reasoning: '', calls: [], finish: null, usage: null, chunks: 0, sawReasoningField: false };
    for await (const ch of stream) {
        out.chunks++;
        if (ch.usage) out.usage = ch.usage;
        const c = ch.choices && ch.choices[0];
        if (!c) continue;
        const d = c.delta || {};
        if (typeof d.content === 'string') out.content += d.content;
        if (typeof d.reasoning_content === 'string') { out.reasoning += d.reasoning_content; out.sawReasoningField = true; }
        for (const tc of d.tool_calls || []) {
            const slot = out.calls[tc.index] || (out.calls[tc.index] = { id: '', name: '', arguments: '' });
            if (tc.id) slot.id = tc.id;
            if (tc.function && tc.function.name) slot.name += tc.function.name;
            if (tc.function && tc.function.arguments) slot.arguments += tc.function.arguments;
        }
        if (c.finish_reason) out.finish = c.finish_reason;
    }
    return out;
}

const base = {
    model,
    messages: [{ role: 'system', content: 'You are a helpful assistant.' }, user('Tell me a short story about a king.')],
    max_tokens: 24, temperature: 0.9, top_p: 0.95, seed: 1234,
};

await step('models.list', async () => {
    const page = await client.models.list();
    const ids = page.data.map((m) => m.id);
    check(ids.includes(model), 'models.list names the model', ids);
    const one = await client.models.retrieve(model);
    check(one.id === model && one.object === 'model', 'models.retrieve', one);
});

let plain;
await step('chat, non-streamed vs streamed', async () => {
    plain = await client.chat.completions.create(base);
    const m = plain.choices[0].message;
    check(plain.object === 'chat.completion' && m.role === 'assistant' && typeof m.content === 'string', 'chat completion shape', plain);
    check(['stop', 'length'].includes(plain.choices[0].finish_reason), 'finish_reason', plain.choices[0].finish_reason);
    const u = plain.usage;
    check(u.prompt_tokens > 0 && u.completion_tokens >= 1 && u.completion_tokens <= 24 &&
          u.total_tokens === u.prompt_tokens + u.completion_tokens, 'usage counts', u);
    check(plain.choices[0].finish_reason !== 'length' || u.completion_tokens === 24, 'length means max_tokens tokens', u);
    const st = await collectChat(await client.chat.completions.create({ ...base, stream: true, stream_options: { include_usage: true } }));
    check(st.content === m.content, 'streamed text == non-streamed text (same seed)', { stream: st.content, plain: m.content });
    check(st.finish === plain.choices[0].finish_reason, 'streamed finish_reason', st.finish);
    check(st.usage && st.usage.completion_tokens === u.completion_tokens && st.usage.prompt_tokens === u.prompt_tokens, 'streamed usage', st.usage);
    check(st.chunks >= 3, 'stream has several chunks', st.chunks);
    const again = await client.chat.completions.create(base);
    check(again.choices[0].message.content === m.content, 'same seed, same text', again.choices[0].message.content);
});

await step('completion', async () => {
    const req = { model, prompt: 'The king said unto', max_tokens: 16, temperature: 0 };
    const c = await client.completions.create(req);
    check(c.object === 'text_completion' && typeof c.choices[0].text === 'string' && c.usage.completion_tokens >= 1, 'completion shape', c);
    let text = '', finish = null;
    for await (const ch of await client.completions.create({ ...req, stream: true })) {
        if (ch.choices[0]) { text += ch.choices[0].text; if (ch.choices[0].finish_reason) finish = ch.choices[0].finish_reason; }
    }
    check(text === c.choices[0].text && finish === c.choices[0].finish_reason, 'streamed completion == non-streamed', { text, plain: c.choices[0].text });
    const e = await client.completions.create({ ...req, echo: true });
    check(e.choices[0].text === 'The king said unto' + c.choices[0].text, 'echo', e.choices[0].text);
});

await step('stop strings', async () => {
    const req = { model, messages: [user('Count the sheep.')], max_tokens: 40, temperature: 0 };
    const full = (await client.chat.completions.create(req)).choices[0].message.content;
    // a stop string from the middle of the greedy text: the answer ends right before it
    const chars = Array.from(full);
    const cut = Math.floor(chars.length / 2);
    const stop = chars.slice(cut, cut + 3).join('');
    if (chars.length >= 8 && !stop.includes('\ufffd')) {
        const want = full.slice(0, full.indexOf(stop));
        const r = await client.chat.completions.create({ ...req, stop: [stop, 'never-seen-xyz'] });
        check(r.choices[0].message.content === want && r.choices[0].finish_reason === 'stop', 'stop string cuts the answer', { got: r.choices[0].message.content, want, stop });
        const st = await collectChat(await client.chat.completions.create({ ...req, stop, stream: true }));
        check(st.content === want && st.finish === 'stop', 'streamed stop string', { got: st.content, want });
    } else {
        check(false, 'greedy text too short or not text to pick a stop string from', full);
    }
});

await step('thinking', async () => {
    const req = { model, messages: [user('Why is the sky blue?')], max_tokens: 20, temperature: 0, reasoning_effort: 'low' };
    const r = await client.chat.completions.create(req);
    const m = r.choices[0].message;
    check(typeof m.reasoning_content === 'string', 'reasoning_content is returned apart from content', m);
    check(r.usage.completion_tokens_details.reasoning_tokens >= 1, 'reasoning tokens counted', r.usage);
    const st = await collectChat(await client.chat.completions.create({ ...req, stream: true }));
    check(st.reasoning === m.reasoning_content && st.content === (m.content || ''), 'streamed reasoning/content == non-streamed', { st, m });
    const off = await client.chat.completions.create({ ...req, reasoning_effort: undefined, thinking: false });
    check(off.choices[0].message.reasoning_content === undefined, 'thinking off: no reasoning_content', off.choices[0].message);
});

await step('tool-call round trip', async () => {
    const tools = [
        { type: 'function', function: { name: 'get_time', description: 'The current time.' } },
        { type: 'function', function: { name: 'get_weather', description: 'The weather in a city.',
            parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } } },
    ];
    const messages = [{ role: 'system', content: 'You can call tools.' }, user('What time is it?')];
    // the forced markup counts as completion tokens, so max_tokens must hold the whole call
    // (with fewer, the reply is 'length' without a call: tests/server/tool_calls.py)
    const req = { model, messages, tools, tool_choice: { type: 'function', function: { name: 'get_time' } }, max_tokens: 48, temperature: 0 };
    const r1 = await client.chat.completions.create(req);
    const m1 = r1.choices[0].message;
    const calls = m1.tool_calls || [];
    check(r1.choices[0].finish_reason === 'tool_calls' && calls.length === 1, 'forced tool call: finish_reason tool_calls', r1.choices[0]);
    check(calls[0] && calls[0].type === 'function' && calls[0].function.name === 'get_time' && /^call_/.test(calls[0].id), 'tool call name and id', calls);
    let args = null;
    try { args = JSON.parse(calls[0].function.arguments); } catch { /* checked below */ }
    check(args !== null && typeof args === 'object', 'tool call arguments are a JSON object', calls[0] && calls[0].function.arguments);
    const st = await collectChat(await client.chat.completions.create({ ...req, stream: true }));
    check(st.finish === 'tool_calls' && st.calls.length === 1 && st.calls[0].name === 'get_time' && st.calls[0].arguments === calls[0].function.arguments,
          'streamed tool call', st);
    // round trip: the assistant's call and the tool's answer go back
    const follow = { model, tools, max_tokens: 12, temperature: 0,
        messages: [...messages, m1, { role: 'tool', tool_call_id: calls[0].id, content: '12:00' }] };
    const r2 = await client.chat.completions.create(follow);
    check(typeof r2.choices[0].message.content === 'string' || (r2.choices[0].message.tool_calls || []).length > 0, 'answer after the tool result', r2.choices[0]);
    check(r2.usage.prompt_tokens_details.cached_tokens >= r1.usage.prompt_tokens + 1 &&
          r2.usage.prompt_tokens_details.cached_tokens < r2.usage.prompt_tokens,
          'the follow-up resumes from the kept state (cached_tokens)', { r1: r1.usage, r2: r2.usage });
    // the same request after another one: the session moved on, the prompt cache holds it
    // whole (t_prefix checks such answers against a server without the cache)
    await client.chat.completions.create({ model, messages: [user('Something unrelated.')], max_tokens: 2, temperature: 0 });
    const r3 = await client.chat.completions.create(follow);
    check(r3.usage.prompt_tokens_details.cached_tokens === r3.usage.prompt_tokens, 'repeated request: all of it from the prompt cache', r3.usage);
    check(JSON.stringify(r3.choices[0].message) === JSON.stringify(r2.choices[0].message) &&
          r3.choices[0].finish_reason === r2.choices[0].finish_reason, 'resumed answer == restored answer', { warm: r2.choices[0], cold: r3.choices[0] });
    // tool_choice none: the tools are not offered and no call comes back
    const r4 = await client.chat.completions.create({ ...req, tool_choice: 'none' });
    check(!(r4.choices[0].message.tool_calls || []).length && r4.choices[0].finish_reason !== 'tool_calls', 'tool_choice none', r4.choices[0]);
});

await step('errors', async () => {
    try {
        await client.chat.completions.create({ ...base, model: 'no-such-model' });
        check(false, 'unknown model must fail');
    } catch (e) {
        check(e instanceof OpenAI.NotFoundError && e.status === 404 && e.code === 'model_not_found', 'unknown model: 404 NotFoundError', { status: e.status, code: e.code });
    }
    try {
        await client.chat.completions.create({ ...base, temperature: 'warm' });
        check(false, 'bad temperature must fail');
    } catch (e) {
        check(e instanceof OpenAI.BadRequestError && e.status === 400 && e.param === 'temperature', 'bad type: 400 BadRequestError', { status: e.status, param: e.param });
    }
    const bad = new OpenAI({ baseURL, apiKey: apiKey + 'x', maxRetries: 0 });
    try {
        await bad.models.list();
        check(false, 'wrong key must fail');
    } catch (e) {
        check(e instanceof OpenAI.AuthenticationError && e.status === 401, 'wrong key: 401 AuthenticationError', { status: e.status });
    }
});

await step('abort mid-stream', async () => {
    const ac = new AbortController();
    const stream = await client.chat.completions.create(
        { model, messages: [user('Go on and on.')], max_tokens: 30000, ignore_eos: true, temperature: 0.7, stream: true },
        { signal: ac.signal });
    let n = 0, aborted = false;
    try {
        for await (const ch of stream) { if (ch.choices[0] && ++n === 3) ac.abort(); }
    } catch (e) {
        aborted = e instanceof OpenAI.APIUserAbortError || e.name === 'AbortError';
    }
    // chunks already read from the socket may still come out after abort() (CI once saw
    // a 4th, then the stream ended without an error); unaborted, it would run to 30000
    check(aborted || (n >= 3 && n < 100), 'the client aborted the stream', n);
    const r = await client.chat.completions.create({ model, messages: [user('Still there?')], max_tokens: 4, temperature: 0 });
    check(r.choices[0].message.content !== undefined, 'served after an abort');
});

console.log(`client: ${pass} passed, ${fail} failed`);
process.exit(fail ? 1 : 0);
