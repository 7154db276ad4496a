// tests/page/page.mjs - the chat page of `moestream serve` in a real headless chromium
// (run by tests/t_page.sh): open the page, type the key, send a message at temperature 0,
// wait for the streamed reply, compare its text with the API's answer to the same request
// (and the prompt count shown under the box, from /v1/tokenize, with its prompt tokens),
// regenerate (the same text again), a follow-up (cached prompt tokens), stop a long reply,
// a thinking reply (reasoning folded in <details>), check that
// every request the page made went to the server itself, and save screenshots.
// Usage: node page.mjs NODE_DIR BASE_URL KEY MODEL CHROMIUM OUT_DIR
// Prints "page: N passed, N failed" last.
import { createRequire } from 'node:module';
import path from 'node:path';

const [nodeDir, base, key, model, chromium, outDir] = process.argv.slice(2);
const require = createRequire(path.join(path.resolve(nodeDir), 'package.json'));
const puppeteer = require('puppeteer-core');
let passed = 0, failed = 0;
const check = (cond, what) => { if (cond) passed++; else { failed++; console.log('FAIL: ' + what); } };
const MSG = 'Once upon a time';
const MAX = 24;

async function apiAnswer() {
  const r = await fetch(base + '/v1/chat/completions', {
    method: 'POST', headers: { 'Content-Type': 'application/json', Authorization: 'Bearer ' + key },
    body: JSON.stringify({ model, messages: [{ role: 'user', content: MSG }], max_tokens: MAX, temperature: 0, thinking: false }) });
  const j = await r.json();
  return j.choices[0].message.content;
}

const browser = await puppeteer.launch({
  executablePath: chromium, headless: true,
  userDataDir: path.resolve(outDir, 'profile'),
  args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
         '--disable-component-update', '--disable-sync', '--disable-dev-shm-usage'],
});
try {
  const page = await browser.newPage();
  await page.setViewport({ width: 1000, height: 700 });
  const urls = [];
  page.on('request', (rq) => urls.push(rq.url()));
  const errors = [];
  page.on('pageerror', (e) => errors.push(String(e)));
  const resp = await page.goto(base + '/', { waitUntil: 'load' });
  check(resp.status() === 200, 'GET / status ' + resp.status());
  // the key unlocks the header line (model, context, budget)
  await page.type('#key', key);
  await page.$eval('#key', (el) => el.dispatchEvent(new Event('change')));
  await page.waitForSelector('#info[data-ready="1"]', { timeout: 20000 });
  const info = await page.$eval('#info', (el) => el.textContent);
  check(info.includes('model ' + model) && info.includes('budget'), 'info line: ' + info);
  await page.$eval('#temperature', (el) => { el.value = '0'; });
  await page.$eval('#max-tokens', (el, m) => { el.value = String(m); }, MAX);
  await page.type('#msg', MSG);
  // the count under the box is the prompt the message makes: the reply's prompt_tokens
  await page.waitForFunction((m) => document.querySelector('#count').dataset.for === m, { timeout: 20000 }, MSG);
  const counted = await page.$eval('#count', (el) => Number(el.dataset.count));
  await page.click('#send');
  await page.waitForSelector('.msg.assistant[data-done="1"]', { timeout: 60000 });
  const got = await page.$eval('.msg.assistant .content', (el) => el.textContent);
  const want = await apiAnswer();
  check(got.length > 0 && got === want, `page reply ${JSON.stringify(got)} != API ${JSON.stringify(want)}`);
  const stats = await page.$eval('.msg.assistant .stats', (el) => el.textContent);
  check(/tok\/s/.test(stats) && /cached/.test(stats), 'stats line: ' + stats);
  const pt = /prompt (\d+) /.exec(stats);
  check(counted > 0 && pt && Number(pt[1]) === counted, `the count under the box ${counted} != the reply's prompt tokens (${stats})`);
  check(await page.$eval('.msg.assistant details', (el) => el.hidden && el.tagName === 'DETAILS'),
        'reasoning <details> present, hidden while empty');
  await page.screenshot({ path: path.join(outDir, 'chat.png'), fullPage: true });

  // regenerate: the same answer at temperature 0
  await page.click('#regen');
  await page.waitForFunction(() => document.querySelectorAll('.msg.assistant').length === 1 &&
                             document.querySelector('.msg.assistant[data-done="1"]'), { timeout: 60000 });
  const again = await page.$eval('.msg.assistant .content', (el) => el.textContent);
  check(again === want, 'regenerated ' + JSON.stringify(again));

  // a follow-up reuses the conversation's kept state: cached prompt tokens in the stats
  await page.$eval('#max-tokens', (el) => { el.value = '8'; });
  await page.type('#msg', 'Go on.');
  await page.click('#send');
  await page.waitForFunction(() => document.querySelectorAll('.msg.assistant[data-done="1"]').length === 2, { timeout: 60000 });
  const cached = await page.$$eval('.msg.assistant .stats', (els) => Number(els[1].dataset.cached));
  check(cached > 0, 'follow-up cached tokens ' + cached);

  // stop: a long reply ends early, marked stopped
  await page.$eval('#max-tokens', (el) => { el.value = '3000'; });
  await page.type('#msg', 'Tell me more.');
  await page.click('#send');
  await page.waitForFunction(() => document.querySelectorAll('.msg.assistant').length === 3 &&
                             document.querySelectorAll('.msg.assistant .content')[2].textContent.length > 0, { timeout: 60000 });
  await page.click('#stop');
  await page.waitForFunction(() => document.querySelectorAll('.msg.assistant[data-done="1"]').length === 3, { timeout: 20000 });
  const st = await page.$$eval('.msg.assistant .stats', (els) => els[2].textContent);
  check(/stopped/.test(st), 'stop: ' + st);

  // thinking: the reasoning shows folded in <details>
  await page.$eval('#max-tokens', (el) => { el.value = '24'; });
  await page.$eval('#thinking', (el) => { el.checked = true; });
  await page.type('#msg', 'Think first.');
  await page.click('#send');
  await page.waitForFunction(() => document.querySelectorAll('.msg.assistant[data-done="1"]').length === 4, { timeout: 60000 });
  const det = await page.$$eval('.msg.assistant details', (els) => ({ hidden: els[3].hidden, open: els[3].open,
                                                                       text: els[3].textContent }));
  check(!det.hidden && !det.open && det.text.length > 'reasoning'.length, 'reasoning folded: ' + JSON.stringify(det));
  await page.screenshot({ path: path.join(outDir, 'chat-4.png'), fullPage: true });

  const foreign = urls.filter((u) => !u.startsWith(base + '/'));
  check(foreign.length === 0, 'requests outside the server: ' + foreign.join(' '));
  check(errors.length === 0, 'page errors: ' + errors.join(' | '));
} catch (e) {
  check(false, 'exception: ' + (e && e.stack || e));
} finally {
  await browser.close();
}
console.log(`page: ${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
