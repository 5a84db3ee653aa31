// The console's figures against a release `madeira dev` started by bench.sh.
import { readFileSync } from 'node:fs';
import http from 'node:http';
import { chromium } from 'playwright-core';

const BASE = process.env.MADEIRA_DEV_URL;
const PID = process.env.MADEIRA_PID;
const RUNS = Number(process.env.BENCH_RUNS);

const median = (xs) => { const s = [...xs].sort((a, b) => a - b); return s[Math.floor(s.length / 2)]; };
function serverMs(res, name = 'app') {
  const m = (res.headers.get('server-timing') || '').match(new RegExp(`${name};dur=([0-9.]+)`));
  return m ? Number(m[1]) : null;
}
async function timed(path) {
  const t0 = performance.now();
  const res = await fetch(`${BASE}${path}`);
  const body = await res.text();
  if (!res.ok) throw new Error(`${path}: ${res.status} ${body.slice(0, 200)}`);
  return { server: serverMs(res), layout: serverMs(res, 'layout'), wall: performance.now() - t0, bytes: body.length };
}
async function api(method, path, body) {
  const res = await fetch(`${BASE}/api/v1${path}`, { method, headers: { 'content-type': 'application/json' }, body: body ? JSON.stringify(body) : undefined });
  const text = await res.text();
  if (!res.ok) throw new Error(`${method} ${path}: ${res.status} ${text}`);
  return JSON.parse(text);
}
async function until(what, probe, ms) {
  const end = Date.now() + ms;
  while (Date.now() < end) { const v = await probe(); if (v) return v; await new Promise((r) => setTimeout(r, 200)); }
  throw new Error(`timed out: ${what}`);
}
const rssKb = () => Number(readFileSync(`/proc/${PID}/status`, 'utf8').match(/VmRSS:\s+(\d+)/)[1]);
const report = {};

// 1. Layout of 1,000 nodes: first flow page computes it, the next ones hit the cache.
const first = await timed('/flows/big?focus=all');
const again = [];
for (let i = 0; i < 5; i++) again.push(await timed('/flows/big?focus=all'));
report.layout_1000_ms = first.layout;
report.flow_page_first_ms = first.server;
report.flow_page_cached_ms = median(again.map((x) => x.server));
report.flow_page_cached_layout = again.every((x) => x.layout === null) ? 'cached (no layout computed)' : 'recomputed!';

// 2. A finished 1,000-node run's page.
const run = (await api('POST', '/flows/big/runs', { params: {} })).run_id;
await until('big run finished', async () => ['SUCCESS', 'FAILED'].includes((await api('GET', `/runs/${run}`)).status), 120000);
for (const [label, q] of [['focused (default)', ''], ['all 1,000 nodes', '?focus=all']]) {
  await timed(`/runs/${run}${q}`);
  const xs = [];
  for (let i = 0; i < 7; i++) xs.push(await timed(`/runs/${run}${q}`));
  report[`run_page_${label}`] = { server_ms: median(xs.map((x) => x.server)), wall_ms: Math.round(median(xs.map((x) => x.wall))), kb: Math.round(xs[0].bytes / 1024) };
}

// 3. Interactive in Chromium: navigation to DOMContentLoaded / load and the scripts' ready flag.
const browser = await chromium.launch({ executablePath: '/usr/bin/chromium', headless: true,
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'] });
const page = await browser.newPage({ viewport: { width: 1400, height: 900 } });
for (const [label, q] of [['focused (default)', ''], ['all 1,000 nodes', '?focus=all']]) {
  const xs = [];
  for (let i = 0; i < 4; i++) {
    await page.goto(`${BASE}/runs/${run}${q}`, { waitUntil: 'load' });
    await page.waitForFunction(() => window.Madeira && document.getElementById('live-status')?.dataset.kind === 'ok');
    const nav = await page.evaluate(() => { const n = performance.getEntriesByType('navigation')[0]; return { dcl: n.domContentLoadedEventEnd, load: n.loadEventEnd, live: performance.now() }; });
    xs.push(nav);
  }
  const rest = xs.slice(1);
  report[`chromium_${label}`] = { dom_content_loaded_ms: Math.round(median(rest.map((x) => x.dcl))), load_ms: Math.round(median(rest.map((x) => x.load))), live_stream_open_ms: Math.round(median(rest.map((x) => x.live))) };
}
// A click on a node opens its panel.
await page.goto(`${BASE}/runs/${run}`, { waitUntil: 'load' });
const t0 = Date.now();
await page.click('svg.dag g.node >> nth=0');
await page.waitForSelector('#panel .panel-body');
report.chromium_node_panel_ms = Date.now() - t0;
await browser.close();

// 4. Many runs, then the runs search.
const t1 = Date.now();
let made = 0, failed = 0;
const deadline = Date.now() + 240000;
async function worker() {
  while (made + failed < RUNS && Date.now() < deadline) {
    try { await api('POST', '/flows/tiny/runs', { params: {} }); made++; } catch { failed++; }
  }
}
await Promise.all(Array.from({ length: 48 }, worker));
report.runs_created = made;
report.runs_create_per_s = Math.round(made / ((Date.now() - t1) / 1000));
report.runs_create_errors = failed;
await until('tiny runs finished', async () => (await api('GET', '/runs?flow=tiny&status=RUNNING&limit=1')).runs.length === 0, 600000);
const total = await fetch(`${BASE}/runs?flow=tiny`).then((r) => r.text());
const now = Date.now();
const iso = (ms) => new Date(ms).toISOString();
const searches = {
  'all, newest page': '/runs',
  'flow=tiny': '/runs?flow=tiny',
  'state=SUCCESS': '/runs?state=SUCCESS',
  'state=FAILED+RUNNING (rare)': '/runs?state=FAILED&state=RUNNING',
  'actor=local': '/runs?actor=local',
  'actor=nobody (none)': '/runs?actor=nobody',
  'flow+time range (middle)': `/runs?flow=tiny&since=${encodeURIComponent(iso(t1 + (now - t1) / 3))}&until=${encodeURIComponent(iso(t1 + (now - t1) / 2))}`,
};
report.search = {};
for (const [label, path] of Object.entries(searches)) {
  await timed(path);
  const xs = [];
  for (let i = 0; i < 7; i++) xs.push(await timed(path));
  report.search[label] = { server_ms: median(xs.map((x) => x.server)), wall_ms: Math.round(median(xs.map((x) => x.wall))) };
}
// Page 20 by cursor.
let path = '/runs?flow=tiny';
for (let i = 0; i < 20; i++) {
  const body = await fetch(`${BASE}${path}`).then((r) => r.text());
  const m = body.match(/href="(\/runs\?[^"]*cursor=[^"]+)"/);
  if (!m) break;
  path = m[1].replace(/&amp;/g, '&');
}
const deep = [];
for (let i = 0; i < 5; i++) deep.push(await timed(path));
report.search['page 20 by cursor'] = { server_ms: median(deep.map((x) => x.server)) };
void total;

// 5. Memory per SSE subscriber: RSS with 0, 1,000 and 2,000 open streams; the
// second thousand gives the steady cost (the first also grows allocator arenas).
const N = 1000;
const agent = new http.Agent({ keepAlive: false, maxSockets: Infinity });
const open = [];
async function openStreams(n) {
  await Promise.all(Array.from({ length: n }, () => new Promise((resolve, reject) => {
    const req = http.get(`${BASE}/events?run=none`, { agent }, (res) => {
      if (res.statusCode !== 200) reject(new Error(`sse ${res.statusCode}`));
      res.on('data', () => {});
      open.push(req);
      resolve();
    });
    req.on('error', reject);
  })));
  await api('POST', '/flows/tiny/runs', { params: {} }); // every stream handles an event
  await new Promise((r) => setTimeout(r, 2000));
  return rssKb();
}
await new Promise((r) => setTimeout(r, 1000));
const rss0 = rssKb();
const rss1 = await openStreams(N);
const rss2 = await openStreams(N);
report.sse_subscribers = open.length;
report.sse_rss_kb = { none: rss0, [N]: rss1, [2 * N]: rss2 };
report.sse_bytes_per_subscriber_first_1000 = Math.round(((rss1 - rss0) * 1024) / N);
report.sse_bytes_per_subscriber_next_1000 = Math.round(((rss2 - rss1) * 1024) / N);
for (const r of open) r.destroy();
agent.destroy();

console.log(JSON.stringify(report, null, 2));
