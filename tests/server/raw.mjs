// tests/server/raw.mjs - raw HTTP tests of `moestream serve` (node's http module, no
// dependencies): concurrency, disconnects, fairness, the queue limit, an oversized
// chunked body.
//
// usage: node tests/server/raw.mjs HOST PORT API_KEY MODEL MAX_QUEUE
// Checks, each counted:
//   - 8 concurrent clients x 5 requests (chat and completion, streamed and not, greedy)
//     are all answered 200 with exactly the text each gets when asked alone;
//   - a client that disconnects mid-stream, and one that disconnects while waiting for a
//     non-streamed answer, cancel their generation: the queue is empty again long
//     before the 2000 tokens they asked for could have been generated, and the server
//     answers the next request;
//   - fairness: 3 requests of user A queued before 1 of user B -> B is served second;
//   - more requests than --max-queue: the extra ones get 429 with an error object, and
//     disconnecting the queued ones empties the queue;
//   - a chunked body larger than --max-body gets 413 with an error object.
// Last line: "raw: N passed, N failed".
import http from 'node:http';

const [host, portStr, apiKey, model, maxQueueStr] = process.argv.slice(2);
const port = Number(portStr), maxQueue = Number(maxQueueStr);
let pass = 0, fail = 0;
function check(cond, what, extra) {
    if (cond) pass++;
    else { fail++; console.log(`FAIL: ${what}${extra !== undefined ? ': ' + JSON.stringify(extra).slice(0, 600) : ''}`); }
}
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const agent = new http.Agent({ keepAlive: true, maxSockets: 64 });

// one request; resolves {status, body, events}; opts.onEvent(ev, req) sees each SSE data line
function request(method, path, body, opts = {}) {
    return new Promise((resolve) => {
        const data = body === undefined ? undefined : (typeof body === 'string' ? body : JSON.stringify(body));
        const headers = { Authorization: `Bearer ${apiKey}`, ...(opts.headers || {}) };
        if (data !== undefined && !opts.chunked) headers['Content-Length'] = Buffer.byteLength(data);
        if (data !== undefined) headers['Content-Type'] = 'application/json';
        const req = http.request({ host, port, method, path, headers, agent: opts.noAgent ? false : agent }, (res) => {
            let buf = '';
            const events = [];
            res.setEncoding('utf8');
            res.on('data', (d) => {
                buf += d;
                if (opts.onEvent) {
                    let i;
                    while ((i = buf.indexOf('\n\n')) >= 0) {
                        const ev = buf.slice(0, i);
                        buf = buf.slice(i + 2);
                        if (ev.startsWith('data: ')) { events.push(ev.slice(6)); opts.onEvent(ev.slice(6), req); }
                    }
                }
            });
            res.on('end', () => resolve({ status: res.statusCode, body: buf, events }));
            res.on('error', (e) => resolve({ status: -1, body: String(e), events }));
        });
        req.on('error', (e) => resolve({ status: -1, body: String(e), events: [] }));
        if (opts.chunked && data !== undefined) {
            for (let i = 0; i < data.length; i += 65536) req.write(data.slice(i, i + 65536));
        } else if (data !== undefined) req.write(data);
        req.end();
        if (opts.onRequest) opts.onRequest(req);
    });
}

function isErrorObject(body, code) {
    try {
        const e = JSON.parse(body).error;
        return typeof e.message === 'string' && typeof e.type === 'string' && 'param' in e && 'code' in e &&
            (code === undefined || e.code === code);
    } catch { return false; }
}

// the text of a response: streamed (SSE) or not, chat or completion
function textOf(kind, stream, r) {
    if (r.status !== 200) return null;
    if (!stream) {
        const o = JSON.parse(r.body);
        return kind === 'chat' ? o.choices[0].message.content : o.choices[0].text;
    }
    let t = '';
    const evs = r.events.length ? r.events : r.body.split('\n\n').filter((e) => e.startsWith('data: ')).map((e) => e.slice(6));
    if (evs[evs.length - 1] !== '[DONE]') return null;
    for (const e of evs.slice(0, -1)) {
        const o = JSON.parse(e);
        if (!o.choices[0]) continue;
        t += kind === 'chat' ? (o.choices[0].delta.content || '') : o.choices[0].text;
    }
    return t;
}

function job(client, k) {
    const kind = k % 2 ? 'completion' : 'chat';
    const stream = k % 3 === 1;
    const body = kind === 'chat'
        ? { model, messages: [{ role: 'user', content: `Client ${client} asks question ${k % 2}.` }], max_tokens: 8, temperature: 0, stream }
        : { model, prompt: `Client ${client} wrote`, max_tokens: 8, temperature: 0, stream };
    return { kind, stream, body, key: `${kind}:${client}:${k % 2}` };
}

async function health() {
    const r = await request('GET', '/health');
    return r.status === 200 ? JSON.parse(r.body) : null;
}

async function waitIdle(ms) {
    const t0 = Date.now();
    while (Date.now() - t0 < ms) {
        const h = await health();
        if (h && h.queue === 0) return Date.now() - t0;
        await sleep(50);
    }
    return -1;
}

// ---- 8 concurrent clients x 5 requests -----------------------------------------
{
    const want = {};
    for (let c = 0; c < 8; c++) for (let k = 0; k < 5; k++) {
        const j = job(c, k);
        if (want[j.key] !== undefined) continue;
        const r = await request('POST', j.kind === 'chat' ? '/v1/chat/completions' : '/v1/completions', { ...j.body, stream: false });
        want[j.key] = textOf(j.kind, false, r);
    }
    const results = await Promise.all([...Array(8).keys()].map(async (c) => {
        const got = [];
        for (let k = 0; k < 5; k++) {
            const j = job(c, k);
            const r = await request('POST', j.kind === 'chat' ? '/v1/chat/completions' : '/v1/completions', j.body);
            got.push({ j, r, text: textOf(j.kind, j.stream, r) });
        }
        return got;
    }));
    let answered = 0, same = 0;
    for (const got of results) for (const { j, r, text } of got) {
        if (r.status === 200) answered++;
        if (text !== null && text === want[j.key]) same++;
        else console.log(`  mismatch ${j.key} stream=${j.stream}: status ${r.status} ${JSON.stringify(text)} != ${JSON.stringify(want[j.key])}`);
    }
    check(answered === 40, '8 clients x 5 requests all answered 200', answered);
    check(same === 40, 'each concurrent answer equals the answer alone', same);
}

// ---- disconnects ---------------------------------------------------------------------
{
    const long = { model, messages: [{ role: 'user', content: 'Talk for a long time.' }], max_tokens: 30000, ignore_eos: true, temperature: 0.7 };
    let got = 0;
    const t0 = Date.now();
    await request('POST', '/v1/chat/completions', { ...long, stream: true }, {
        noAgent: true,
        onEvent: (ev, req) => { if (++got === 3) req.destroy(); },
    });
    check(got >= 3, 'stream started before the disconnect', got);
    const idle = await waitIdle(10000);
    check(idle >= 0, 'a stream whose client left is cancelled (queue empty again)', idle);
    // non-streamed: leave while the answer is being generated
    let reqRef;
    const p = request('POST', '/v1/chat/completions', long, { noAgent: true, onRequest: (r) => { reqRef = r; } });
    await sleep(400);
    reqRef.destroy();
    await p;
    const idle2 = await waitIdle(10000);
    check(idle2 >= 0, 'a non-streamed request whose client left is cancelled', idle2);
    const r = await request('POST', '/v1/chat/completions', { model, messages: [{ role: 'user', content: 'hi' }], max_tokens: 3, temperature: 0 });
    check(r.status === 200, 'served after the disconnects', r.status);
    console.log(`  disconnect: ${got} events, cancelled in ${Date.now() - t0} ms overall`);
}

// ---- fairness --------------------------------------------------------------------------
{
    const order = [];
    // long enough (~0.35 s each here) that B is sent while A's first runs and the others wait, also under load
    const body = (user) => ({ model, messages: [{ role: 'user', content: `I am ${user}.` }], max_tokens: 300, ignore_eos: true, temperature: 0, user });
    const ps = [];
    for (let i = 0; i < 3; i++) ps.push(request('POST', '/v1/chat/completions', body('alice')).then((r) => order.push(`A${i}:${r.status}`)));
    for (let t = 0; t < 200; t++) {     // B comes while A's first runs and the other two wait
        const h = await health();
        if (h && h.queue === 3) break;
        await sleep(10);
    }
    ps.push(request('POST', '/v1/chat/completions', body('bob')).then((r) => order.push(`B:${r.status}`)));
    await Promise.all(ps);
    const b = order.findIndex((x) => x.startsWith('B'));
    check(order.every((x) => x.endsWith(':200')) && b >= 0 && b <= 1, 'user B is served before user A\'s queued requests', order);
}

// ---- the queue limit ----------------------------------------------------------------------
{
    const n = maxQueue + 4;
    const reqs = [];
    const body = { model, messages: [{ role: 'user', content: 'Queue me.' }], max_tokens: 8000, ignore_eos: true, temperature: 0 };
    const ps = [];
    for (let i = 0; i < n; i++) ps.push(request('POST', '/v1/chat/completions', body, { noAgent: true, onRequest: (r) => reqs.push(r) }));
    // 429s come back at once; the others wait
    const early = await Promise.race([Promise.all(ps), sleep(1500).then(() => null)]);
    check(early === null, 'the queued requests are still waiting');
    for (const r of reqs) r.destroy();
    const rs = await Promise.all(ps);
    const full = rs.filter((r) => r.status === 429);
    check(full.length >= 3 && full.every((r) => isErrorObject(r.body, 'queue_full')), 'requests beyond --max-queue get 429 + error object', full.length);
    const idle = await waitIdle(10000);
    check(idle >= 0, 'queued requests whose clients left are dropped', idle);
}

// ---- oversized chunked body ----------------------------------------------------------------
{
    const big = JSON.stringify({ model, messages: [{ role: 'user', content: 'x'.repeat(3 << 20) }] });
    const r = await request('POST', '/v1/chat/completions', big, { chunked: true, noAgent: true });
    check(r.status === 413 && isErrorObject(r.body, 'request_too_large'), 'chunked body over --max-body: 413', { status: r.status, body: r.body.slice(0, 200) });
    const r2 = await request('POST', '/v1/chat/completions', { model, messages: [{ role: 'user', content: 'hi' }], max_tokens: 2, temperature: 0 });
    check(r2.status === 200, 'served after an oversized body', r2.status);
}

agent.destroy();
console.log(`raw: ${pass} passed, ${fail} failed`);
process.exit(fail ? 1 : 0);
