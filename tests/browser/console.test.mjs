// Browser tests of the Madeira web console (node:test + playwright-core on
// Debian's Chromium). Started by run.sh, which gives:
//   MADEIRA_SERVE_URL  `madeira serve` with tokens T_OPERATOR / T_VIEWER / T_ADMIN
//   MADEIRA_DEV_URL    `madeira dev` running examples/daily-settlement.yaml
//   SCREENSHOTS        where PNG screenshots go
// Every wait is on a condition with a deadline.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { chromium } from 'playwright-core';

const SERVE = process.env.MADEIRA_SERVE_URL;
const DEV = process.env.MADEIRA_DEV_URL;
const SHOTS = process.env.SCREENSHOTS;
const T = { operator: process.env.T_OPERATOR, viewer: process.env.T_VIEWER };
const DEADLINE_MS = 30000;
const PHONE = { width: 390, height: 844 };

let browser;

before(async () => {
  assert.ok(SERVE && DEV && SHOTS && T.operator && T.viewer, 'run.sh sets the environment');
  browser = await chromium.launch({
    executablePath: '/usr/bin/chromium',
    headless: true,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
      '--disable-background-networking', '--disable-component-update', '--disable-sync'],
    // launch() gives Chromium a fresh temporary user-data-dir of its own.
  });
});

after(async () => { if (browser) await browser.close(); });

/** Calls the REST API (bearer token for `serve`, none for `dev`). */
async function api(base, method, path, body, token) {
  const headers = { 'content-type': 'application/json' };
  if (token) headers.authorization = `Bearer ${token}`;
  const res = await fetch(`${base}/api/v1${path}`, { method, headers, body: body ? JSON.stringify(body) : undefined });
  const text = await res.text();
  assert.ok(res.ok, `${method} ${path}: ${res.status} ${text}`);
  return JSON.parse(text);
}

/** Polls `probe` until it returns a truthy value or the deadline passes. */
async function until(what, probe, ms = DEADLINE_MS) {
  const end = Date.now() + ms;
  let last;
  while (Date.now() < end) {
    last = await probe();
    if (last) return last;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`timed out after ${ms} ms waiting for ${what} (last: ${JSON.stringify(last)})`);
}

async function startRun(base, flow, token) {
  const out = await api(base, 'POST', `/flows/${flow}/runs`, { params: { date: '2026-12-01' } }, token);
  return out.run_id;
}

async function nodeState(base, run, node, token) {
  const r = await api(base, 'GET', `/runs/${run}`, null, token);
  return r.nodes[node].status;
}

async function waitNode(base, run, node, state, token) {
  await until(`${node} ${state}`, async () => (await nodeState(base, run, node, token)) === state);
}

async function context(opts = {}) {
  return browser.newContext({ locale: 'en-US', ...opts });
}

async function signIn(ctx, token) {
  const page = await ctx.newPage();
  await page.goto(`${SERVE}/signin`);
  await page.fill('#token', token);
  await Promise.all([page.waitForURL((u) => !u.pathname.startsWith('/signin'), { timeout: DEADLINE_MS }), page.click('form[action="/signin"] button[type=submit]')]);
  return page;
}

/** The CSRF token the page carries (in the htmx headers of <body>). */
async function csrfOf(page) {
  return page.evaluate(() => JSON.parse(document.body.getAttribute('hx-headers'))['X-CSRF-Token']);
}

/** POSTs a form from inside the page (same origin, the session cookie goes along). */
async function postFrom(page, path, fields) {
  return page.evaluate(async ([p, f]) => {
    const res = await fetch(p, { method: 'POST', body: new URLSearchParams(f), credentials: 'same-origin', headers: { 'HX-Request': 'true' } });
    return res.status;
  }, [path, fields]);
}

async function noHorizontalScroll(page) {
  const { sw, iw } = await page.evaluate(() => ({ sw: document.documentElement.scrollWidth, iw: window.innerWidth }));
  assert.ok(sw <= iw, `page scrolls sideways: scrollWidth ${sw} > innerWidth ${iw}`);
}

test('sign-in: a pasted token opens a session; a wrong one is refused; sign-out ends it', async () => {
  const ctx = await context();
  const page = await ctx.newPage();
  const first = await page.goto(`${SERVE}/runs`);
  assert.match(new URL(page.url()).pathname, /^\/signin/, 'pages need a session');
  assert.equal(first.status(), 200);
  await page.screenshot({ path: `${SHOTS}/signin.png` });
  await page.fill('#token', 'not-a-token');
  await page.click('form[action="/signin"] button[type=submit]');
  await page.waitForSelector('.flash.error');
  assert.match(await page.textContent('.flash.error'), /Unknown token/);
  await page.fill('#token', T.operator);
  await Promise.all([page.waitForURL(`${SERVE}/runs`), page.click('form[action="/signin"] button[type=submit]')]);
  assert.match(await page.textContent('.who'), /ops-alice/);
  const cookies = await ctx.cookies();
  const session = cookies.find((c) => c.name === 'madeira_session');
  assert.ok(session && session.httpOnly && session.sameSite === 'Strict', `cookie: ${JSON.stringify(session)}`);
  assert.ok(!(await page.content()).includes(T.operator), 'the token is not in the page');
  await Promise.all([page.waitForURL(/\/signin/), page.click('form[action="/signout"] button')]);
  await page.goto(`${SERVE}/`);
  assert.match(new URL(page.url()).pathname, /^\/signin/, 'signed out');
  await ctx.close();
});

test('viewer: no action buttons, and a forged POST with a viewer session is 403', async () => {
  const run = await startRun(SERVE, 'payout-approval', T.operator);
  await waitNode(SERVE, run, 'approve', 'MANUAL_CONFIRM', T.operator);
  const ctx = await context();
  const page = await signIn(ctx, T.viewer);
  await page.goto(`${SERVE}/runs/${run}?node=approve`);
  await page.waitForSelector('#panel .panel-body[data-node="approve"]');
  assert.equal(await page.locator('button[data-open]').count(), 0, 'a viewer sees no action buttons');
  assert.match(await page.textContent('#panel .denied'), /grafana.*Viewer.*Operator/s, 'and is told why');
  await page.goto(`${SERVE}/approvals`);
  assert.equal(await page.locator('button[data-open]').count(), 0);
  assert.equal(await page.locator('article.approval').count() >= 1, true, 'but sees what waits');
  const csrf = await csrfOf(page);
  const status = await postFrom(page, `/runs/${run}/nodes/approve/confirm`, { csrf, reason: 'forged by a viewer' });
  assert.equal(status, 403);
  assert.equal(await nodeState(SERVE, run, 'approve', T.operator), 'MANUAL_CONFIRM', 'nothing happened');
  await ctx.close();
});

test('operator: a POST without (or with a wrong) CSRF token is refused; with it the action is audited by name', async () => {
  const run = await startRun(SERVE, 'payout-approval', T.operator);
  await waitNode(SERVE, run, 'approve', 'MANUAL_CONFIRM', T.operator);
  const ctx = await context();
  const page = await signIn(ctx, T.operator);
  assert.equal(await postFrom(page, `/runs/${run}/nodes/approve/confirm`, { reason: 'no csrf' }), 403);
  assert.equal(await postFrom(page, `/runs/${run}/nodes/approve/confirm`, { reason: 'bad csrf', csrf: 'x'.repeat(64) }), 403);
  assert.equal(await nodeState(SERVE, run, 'approve', T.operator), 'MANUAL_CONFIRM');
  const csrf = await csrfOf(page);
  assert.equal(await postFrom(page, `/runs/${run}/nodes/approve/confirm`, { csrf, reason: '' }), 400, 'a reason is required');
  assert.equal(await postFrom(page, `/runs/${run}/nodes/approve/confirm`, { csrf, reason: 'totals match the bank' }), 200);
  await waitNode(SERVE, run, 'approve', 'SUCCESS', T.operator);
  const audit = await api(SERVE, 'GET', `/audit?run_id=${run}`, null, T.operator);
  const entry = audit.entries.find((e) => e.action === 'confirm');
  assert.equal(entry.actor, 'ops-alice');
  assert.equal(entry.reason, 'totals match the bank');
  await ctx.close();
});

test('the demo flow page draws its DAG: every node and edge, weak dashed, conditional dotted', async () => {
  const ctx = await context({ viewport: { width: 1400, height: 900 } });
  const page = await ctx.newPage();
  await page.goto(`${DEV}/flows/daily-settlement`);
  const flow = await api(DEV, 'GET', '/flows/daily-settlement');
  // `#dag` is drawn across (shown here); `#v-dag`, its phone copy drawn down, has the same boxes and edges.
  assert.equal(await page.locator('svg#dag g.node').count(), flow.nodes.length);
  assert.equal(await page.locator('svg#v-dag g.node').count(), flow.nodes.length);
  assert.equal(await page.locator('svg#v-dag').isVisible(), false, 'the phone copy is hidden on a desktop');
  for (const node of flow.nodes) assert.equal(await page.locator(`svg#dag #n-${node}`).count(), 1, node);
  // SPEC §2's settlement has 10 dependencies; refund_check has `when`, two are weak.
  assert.equal(await page.locator('svg#dag path.edge').count(), 10);
  assert.equal(await page.locator('svg#v-dag path.edge').count(), 10);
  assert.equal(await page.locator('svg#dag path.edge.weak').count(), 2);
  assert.equal(await page.locator('svg#dag path.edge.cond').count(), 1);
  assert.equal(await page.locator('#e-receivables-notify.weak').count(), 1);
  assert.match(await page.textContent('#n-refund_check .when'), /refund_count > 0/);
  await page.screenshot({ path: `${SHOTS}/flow.png`, fullPage: true });
  await ctx.close();
});

test('approvals inbox: confirming with a reason turns the open run page SUCCESS without a reload', async () => {
  const run = await startRun(DEV, 'daily-settlement');
  const ctx = await context({ viewport: { width: 1400, height: 1000 } });
  const runPage = await ctx.newPage();
  await runPage.goto(`${DEV}/runs/${run}`);
  await runPage.evaluate(() => { window.__sameDocument = true; });
  await waitNode(DEV, run, 'confirm', 'MANUAL_CONFIRM');
  // The run page learns of the waiting node live.
  await runPage.waitForSelector('#n-confirm.st-MANUAL_CONFIRM', { timeout: DEADLINE_MS });
  await runPage.screenshot({ path: `${SHOTS}/run-waiting.png`, fullPage: true });
  const inbox = await ctx.newPage();
  await inbox.goto(`${DEV}/approvals`);
  const card = inbox.locator(`article.approval[data-run="${run}"]`);
  assert.match(await card.textContent(), /Balance diff is 0\.00 CNY/, 'the prompt is rendered from outputs');
  await inbox.screenshot({ path: `${SHOTS}/approvals.png`, fullPage: true });
  await card.locator('button[data-open]', { hasText: 'Confirm' }).click();
  const dialog = inbox.locator(`dialog[id="dlg-confirm-${run}-confirm"]`);
  await dialog.locator('textarea[name=reason]').fill('balance diff checked with the bank');
  await dialog.locator('button[type=submit]').click();
  await inbox.waitForSelector('#flash .flash.ok', { timeout: DEADLINE_MS });
  await runPage.waitForSelector('#run-live[data-state="SUCCESS"]', { timeout: DEADLINE_MS });
  await runPage.waitForSelector('#n-export.st-SUCCESS');
  assert.equal(await runPage.evaluate(() => window.__sameDocument), true, 'the run page was not reloaded');
  assert.match(await runPage.textContent('#run-state'), /SUCCESS/);
  assert.match(await runPage.textContent('.audit-section'), /balance diff checked with the bank/);
  // The inbox drops the confirmed node by itself.
  await inbox.waitForFunction((id) => !document.querySelector(`article.approval[data-run="${id}"]`), run, { timeout: DEADLINE_MS });
  // Side panel with the log of a node.
  await runPage.click('#n-pull_payments');
  await runPage.waitForSelector('#panel .panel-body[data-node="pull_payments"]');
  await runPage.waitForFunction(() => /pulled 1284 payments/.test(document.querySelector('#panel pre.log')?.textContent || ''), null, { timeout: DEADLINE_MS });
  await runPage.click('#n-pull_refunds');
  await runPage.waitForSelector('#panel .panel-body[data-node="pull_refunds"] .tab[data-attempt="2"]');
  assert.equal(await runPage.locator('#panel .tab').count(), 2, 'one log tab per attempt');
  await runPage.screenshot({ path: `${SHOTS}/run.png`, fullPage: true });
  // A finished attempt that printed nothing (the builtin noop) says so, not "yet".
  await runPage.click('#n-notify');
  await runPage.waitForSelector('#panel .panel-body[data-node="notify"]');
  await runPage.waitForFunction(() => document.querySelector('#panel pre.log')?.textContent === 'This attempt printed nothing.', null, { timeout: DEADLINE_MS });
  await ctx.close();
});

test('a running job\'s log lines appear live in the node panel, in order, while it runs', async () => {
  const run = await startRun(DEV, 'ticker');
  const ctx = await context({ viewport: { width: 1400, height: 1000 } });
  const page = await ctx.newPage();
  await page.goto(`${DEV}/runs/${run}?node=tick`);
  await page.waitForSelector('#panel .panel-body[data-node="tick"]');
  // Arrival time of each line in the page (job prints `tick N <epoch ms>`).
  await page.evaluate(() => {
    window.__arrived = {};
    const note = () => {
      const text = document.querySelector('#panel pre.log')?.textContent || '';
      for (const m of text.matchAll(/tick (\d+) (\d+)/g)) {
        if (!(m[1] in window.__arrived)) window.__arrived[m[1]] = { printed: Number(m[2]), seen: Date.now() };
      }
    };
    new MutationObserver(note).observe(document.body, { subtree: true, childList: true, characterData: true });
    note();
  });
  await page.waitForFunction(() => /tick 5 \d+/.test(document.querySelector('#panel pre.log')?.textContent || ''), null, { timeout: DEADLINE_MS });
  // Seen while the job still runs (it prints 40 lines over 8 s).
  assert.equal(await nodeState(DEV, run, 'tick', undefined), 'RUNNING', 'line 5 shown before the job ended');
  const text = await page.textContent('#panel pre.log');
  const seen = [...text.matchAll(/tick (\d+) /g)].map((m) => Number(m[1]));
  assert.ok(seen.length >= 5 && seen.length < 40, `a part of the output so far: ${seen.length} lines`);
  assert.deepEqual(seen, seen.map((_, i) => i + 1), 'lines in order, none missing');
  await page.screenshot({ path: `${SHOTS}/run-live-log.png`, fullPage: true });
  await waitNode(DEV, run, 'tick', 'SUCCESS');
  await page.waitForFunction(() => /tick 40 \d+/.test(document.querySelector('#panel pre.log')?.textContent || ''), null, { timeout: DEADLINE_MS });
  const all = [...(await page.textContent('#panel pre.log')).matchAll(/tick (\d+) /g)].map((m) => Number(m[1]));
  assert.deepEqual(all, Array.from({ length: 40 }, (_, i) => i + 1), 'every line once, in order');
  // Lines printed once the page was following (the earlier ones came with the first read).
  const arrived = Object.values(await page.evaluate(() => window.__arrived));
  const opened = Math.min(...arrived.map((a) => a.seen));
  const delays = arrived.filter((a) => a.printed > opened).map((a) => a.seen - a.printed).sort((a, b) => a - b);
  const pct = (p) => delays[Math.min(delays.length - 1, Math.floor(delays.length * p))];
  console.log(`live log: ${delays.length} lines printed while followed, print→page delay p50 ${pct(0.5)} ms, p90 ${pct(0.9)} ms, max ${pct(1)} ms`);
  await ctx.close();
});

test('times: relative by default, in the flow\'s timezone or UTC on request, kept across pages', async () => {
  const runs = await api(DEV, 'GET', '/runs?flow=daily-settlement&limit=1');
  const ctx = await context({ viewport: { width: 1400, height: 900 } });
  const page = await ctx.newPage();
  await page.goto(`${DEV}/runs/${runs.runs[0].run_id}`);
  const first = page.locator('.run-head time[datetime]').first();
  assert.match(await first.textContent(), /ago|in /, 'relative first');
  await page.selectOption('#time-mode', 'flow');
  await until('flow timezone text', async () => /Asia\/Shanghai$/.test(await first.textContent()));
  const iso = await first.getAttribute('datetime');
  const shanghai = new Date(Date.parse(iso) + 8 * 3600 * 1000).toISOString().slice(0, 19).replace('T', ' ');
  assert.equal(await first.textContent(), `${shanghai} Asia/Shanghai`, 'UTC+8, no DST in Shanghai');
  await page.selectOption('#time-mode', 'utc');
  await until('UTC text', async () => / UTC$/.test(await first.textContent()));
  assert.equal(await first.textContent(), `${iso.slice(0, 19).replace('T', ' ')} UTC`);
  await page.goto(`${DEV}/approvals`);
  assert.equal(await page.inputValue('#time-mode'), 'utc', 'the choice is kept');
  await page.selectOption('#time-mode', 'relative');
  await ctx.close();
});

test('times: relative times count on from the server\'s clock, whatever the browser\'s says', async () => {
  const run = await startRun(DEV, 'ticker'); // no concurrency limit: later tests' runs do not wait for it
  const ctx = await context({ viewport: { width: 1400, height: 900 } });
  const page = await ctx.newPage();
  await page.clock.install({ time: Date.now() - 3600 * 1000 }); // this browser's clock: an hour behind
  await page.goto(`${DEV}/runs/${run}`);
  const created = page.locator('.run-head time[datetime]').first();
  assert.match(await created.textContent(), /^\d+ s ago$/, 'as the server rendered it');
  await page.clock.fastForward('01:30'); // the page's own timers rewrite the times meanwhile
  const m = await until('the created time to count on', async () => (await created.textContent()).match(/^(\d+) min ago$/), 10000);
  assert.equal(Number(m[1]), 1, 'a minute and a half after the run was created, not an hour off');
  await ctx.close();
});

test('runs search: bulk cancel of selected runs and bulk rerun of failed nodes, each audited', async () => {
  const ids = [];
  for (let i = 0; i < 3; i++) ids.push(await startRun(SERVE, 'payout-approval', T.operator));
  for (const id of ids) await waitNode(SERVE, id, 'approve', 'MANUAL_CONFIRM', T.operator);
  const ctx = await context({ viewport: { width: 1400, height: 1000 } });
  const page = await signIn(ctx, T.operator);
  await page.goto(`${SERVE}/runs?flow=payout-approval&state=RUNNING`);
  for (const id of ids) await page.check(`input[name=sel][value="${id}"]`);
  assert.equal(await page.textContent('#bulk-runs .sel-count'), '3');
  await page.fill('#bulk-runs textarea[name=reason]', 'payout moved to tomorrow');
  await page.click('#bulk-runs button[value=cancel]');
  await page.waitForSelector('#flash .flash.ok', { timeout: DEADLINE_MS });
  for (const id of ids) {
    await until(`run ${id} CANCELLED`, async () => (await api(SERVE, 'GET', `/runs/${id}`, null, T.operator)).status === 'CANCELLED');
  }
  const audit = await api(SERVE, 'GET', `/audit?run_id=${ids[0]}`, null, T.operator);
  assert.ok(JSON.stringify(audit).includes('payout moved to tomorrow'), `cancel audited with the reason: ${JSON.stringify(audit)}`);
  // Rerun failed: stock-sync on dev fails at its first node.
  const failed = await startRun(DEV, 'stock-sync');
  await until('stock-sync FAILED', async () => (await api(DEV, 'GET', `/runs/${failed}`)).status === 'FAILED');
  const before = (await api(DEV, 'GET', `/runs/${failed}`)).nodes.pull_stock.attempts;
  const dev = await ctx.newPage();
  await dev.goto(`${DEV}/runs?flow=stock-sync&state=FAILED`);
  await dev.check(`input[name=sel][value="${failed}"]`);
  await dev.fill('#bulk-runs textarea[name=reason]', 'warehouse API is back');
  await dev.click('#bulk-runs button[value=rerun-failed]');
  await dev.waitForSelector('#flash .flash.ok', { timeout: DEADLINE_MS });
  await until('pull_stock rerun', async () => (await api(DEV, 'GET', `/runs/${failed}`)).nodes.pull_stock.attempts > before);
  await page.screenshot({ path: `${SHOTS}/runs-bulk.png`, fullPage: true });
  await ctx.close();
});

test('run page names where each attempt ran and who started the run; runs search filters by actor', async () => {
  // dev: the ticker's sidecar job ran on the in-process sidecar `local@<host>`.
  const ticker = await startRun(DEV, 'ticker');
  await waitNode(DEV, ticker, 'tick', 'SUCCESS');
  const ctx = await context({ viewport: { width: 1400, height: 1000 } });
  const devPage = await ctx.newPage();
  await devPage.goto(`${DEV}/runs/${ticker}?node=tick`);
  const host = (await devPage.textContent('#r-tick td.host')).trim();
  assert.match(host, /^local@/, `the nodes table names the sidecar: ${host}`);
  assert.match(await devPage.textContent('#panel table.attempts td.host'), /^local@/, 'so does the panel');
  assert.equal((await devPage.textContent('#run-actor')).trim(), 'local');
  // serve: a run the operator's token started is hers, and found by her name only.
  const mine = await startRun(SERVE, 'payout-approval', T.operator);
  const page = await signIn(ctx, T.operator);
  await page.goto(`${SERVE}/runs/${mine}`);
  assert.equal((await page.textContent('#run-actor')).trim(), 'ops-alice');
  await page.goto(`${SERVE}/runs`);
  await page.fill('form.search input[name=actor]', 'ops-alice');
  await Promise.all([page.waitForURL(/actor=ops-alice/), page.click('form.search button[type=submit]')]);
  const actors = await page.$$eval('table.runs td.actor', (cells) => cells.map((c) => c.textContent.trim()));
  assert.ok(actors.length > 0 && actors.every((a) => a === 'ops-alice'), `only her runs: ${actors}`);
  assert.ok(await page.$(`table.runs tr[data-run="${mine}"]`), 'her new run is listed');
  await page.screenshot({ path: `${SHOTS}/runs-by-actor.png`, fullPage: true });
  await page.goto(`${SERVE}/runs?actor=grafana`);
  assert.equal(await page.$$eval('table.runs tr[data-run]', (rows) => rows.length), 0, 'the viewer started none');
  await ctx.close();
});

test('zh-CN and en both render; the choice is kept in a cookie', async () => {
  const ctx = await context({ locale: 'zh-CN' });
  const page = await ctx.newPage();
  await page.goto(`${DEV}/`);
  assert.equal(await page.getAttribute('html', 'lang'), 'zh-CN');
  assert.match(await page.textContent('nav.main-nav'), /概览.*待确认.*流程/s);
  const runs = await api(DEV, 'GET', '/runs?flow=daily-settlement&limit=1');
  await page.goto(`${DEV}/runs/${runs.runs[0].run_id}`);
  assert.match(await page.textContent('.nodes-section h2'), /节点/);
  // State badges read in Chinese; the SPEC name stays in data-state.
  const badges = await page.$$eval('#nodes-table .badge', (els) => els.map((e) => [e.dataset.state, e.textContent.trim()]));
  assert.ok(badges.length > 0, 'the nodes table has badges');
  for (const [state, text] of badges) {
    assert.match(state, /^[A-Z_]+$/, 'data-state holds the SPEC name');
    assert.ok(!text.includes(state) && /[\u4e00-\u9fff]/.test(text), `badge ${state} reads "${text}"`);
  }
  await page.screenshot({ path: `${SHOTS}/run-zh-CN.png`, fullPage: true });
  // The flow page's business dates: its calendar and next business-day ticks, in Chinese.
  await page.goto(`${DEV}/flows/daily-settlement`);
  assert.match(await page.textContent('#bizdates h2'), /业务日期/);
  assert.match(await page.textContent('#bizdates'), /日历.*接下来的工作日触发/s);
  const ticks = await page.$$eval('#next-ticks time', (els) => els.map((e) => e.getAttribute('datetime')));
  assert.equal(ticks.length, 5, `five next ticks of its 01:05 cron: ${ticks}`);
  await page.goto(`${DEV}/`);
  assert.match(await page.textContent('main'), /最近失败/);
  assert.ok(!/\b(SUCCESS|FAILED|RUNNING|CANCELLED|QUEUED)\b/.test(await page.textContent('.cards-row')), 'overview counts in Chinese');
  await page.screenshot({ path: `${SHOTS}/overview-zh-CN.png`, fullPage: true });
  const icon = await fetch(`${DEV}/favicon.ico`);
  assert.equal(icon.status, 200, '/favicon.ico answers');
  assert.equal(icon.headers.get('content-type'), 'image/svg+xml');
  await page.click('a.lang');
  await page.waitForFunction(() => document.documentElement.lang === 'en');
  assert.match(await page.textContent('nav.main-nav'), /Overview.*Approvals.*Flows/s);
  await page.goto(`${DEV}/approvals`);
  assert.equal(await page.getAttribute('html', 'lang'), 'en', 'the cookie outranks Accept-Language');
  await page.goto(`${DEV}/approvals?lang=zh-CN`);
  assert.match(await page.textContent('h1'), /待确认/);
  await ctx.close();
});

test('phone 390×844: run page and approvals do not scroll sideways; the confirm dialog is reachable', async () => {
  const run = await startRun(DEV, 'daily-settlement');
  await waitNode(DEV, run, 'confirm', 'MANUAL_CONFIRM');
  const ctx = await context({ viewport: PHONE, isMobile: true, hasTouch: true, deviceScaleFactor: 2 });
  const page = await ctx.newPage();
  await page.goto(`${DEV}/runs/${run}?node=confirm`);
  await page.waitForSelector('#panel .panel-body');
  await noHorizontalScroll(page);
  // The graph is drawn top to bottom on a phone, at a readable scale, not the
  // wide drawing shrunk to a third.
  assert.equal(await page.locator('#dag').isVisible(), false, 'the wide drawing is hidden on a phone');
  assert.ok(await page.locator('#v-dag').isVisible(), 'the top-to-bottom drawing is shown');
  const scale = await page.evaluate(() => {
    const svg = document.getElementById('v-dag');
    return svg.getBoundingClientRect().width / svg.viewBox.baseVal.width;
  });
  assert.ok(scale >= 0.55, `the phone's graph is drawn at ${scale.toFixed(2)} of its size`);
  assert.ok(await page.locator('#v-n-confirm.st-MANUAL_CONFIRM').isVisible(), 'its boxes carry states');
  await page.screenshot({ path: `${SHOTS}/run-phone.png` });
  await page.goto(`${DEV}/approvals`);
  await noHorizontalScroll(page);
  const card = page.locator(`article.approval[data-run="${run}"]`);
  await card.locator('button[data-open]', { hasText: 'Confirm' }).tap();
  const dialog = page.locator(`dialog[id="dlg-confirm-${run}-confirm"]`);
  await dialog.waitFor({ state: 'visible' });
  const box = await dialog.boundingBox();
  assert.ok(box.x >= 0 && box.y >= 0 && box.x + box.width <= PHONE.width && box.y + box.height <= PHONE.height, `dialog in view: ${JSON.stringify(box)}`);
  await page.screenshot({ path: `${SHOTS}/approvals-phone.png` });
  await dialog.locator('textarea[name=reason]').fill('checked on the phone');
  await dialog.locator('button[type=submit]').tap();
  await waitNode(DEV, run, 'confirm', 'SUCCESS');
  await ctx.close();
});

test('phone 390×844: the audit trail reads as cards, time on one line and the reason shown', async () => {
  const ctx = await context({ viewport: PHONE, isMobile: true, hasTouch: true, deviceScaleFactor: 2 });
  const page = await ctx.newPage();
  await page.goto(`${DEV}/audit`);
  const row = page.locator('table.audit-table tbody tr').first();
  await row.waitFor();
  await noHorizontalScroll(page);
  const time = await row.locator('td.time').boundingBox();
  const lineHeight = await row.locator('td.time').evaluate((td) => parseFloat(getComputedStyle(td).lineHeight) || 20);
  assert.ok(time.height <= lineHeight * 1.6, `the time wraps: ${time.height}px for a ${lineHeight}px line`);
  // The confirmation the phone test above made, with its reason.
  const reasoned = page.locator('table.audit-table td.reason', { hasText: 'checked on the phone' }).first();
  assert.ok(await reasoned.isVisible(), 'the reason is shown');
  await page.screenshot({ path: `${SHOTS}/audit-phone.png` });
  await ctx.close();
});

test('estate page: a failed upstream holds two flows, each held flow says whom it waits for (en, zh-CN, desktop, phone)', async () => {
  const day = '2026-12-04';
  const start = async (flow) => (await api(SERVE, 'POST', `/flows/${flow}/runs`, { biz_date: day }, T.operator)).run_id;
  const run = (id) => api(SERVE, 'GET', `/runs/${id}`, null, T.operator);
  const pull = await start('estate-pull');
  await until('estate-pull FAILED', async () => (await run(pull)).status === 'FAILED');
  const clean = await start('estate-clean');
  const settle = await start('estate-settle');
  for (const id of [clean, settle]) await until(`${id} held`, async () => typeof (await run(id)).waiting_reason === 'string');
  const flows = (await api(SERVE, 'GET', '/flows', null, T.operator)).flows.length;

  const ctx = await context({ viewport: { width: 1400, height: 900 } });
  const page = await signIn(ctx, T.viewer);
  await page.goto(`${SERVE}/estate?date=${day}`);
  assert.ok(await page.locator('svg#estate-map').isVisible(), 'drawn across on a desktop');
  assert.equal(await page.locator('svg#v-estate-map').isVisible(), false, 'the phone copy is hidden');
  assert.equal(await page.locator('svg#estate-map g.node').count(), flows, 'every flow is a box');
  const held = page.locator('svg#estate-map #n-estate-clean');
  assert.equal(await held.getAttribute('data-state'), 'held');
  assert.match(await held.textContent(), /waits for estate-pull/);
  assert.match(await page.textContent('svg#estate-map #n-estate-settle'), /waits for estate-clean/);
  assert.match(await page.textContent('svg#estate-map #n-estate-pull'), /failed · holds 2/);
  assert.equal(await page.locator('svg#estate-map #e-estate-pull-estate-clean.holding').count(), 1, 'the failure\'s edge is marked');
  assert.match(await page.textContent('ul.estate-roots'), /estate-pull\.pull\s+failed: holds\s+estate-clean, estate-settle/);
  assert.match(await page.textContent('#row-estate-settle'), /waits for estate-clean.*root cause estate-pull\.pull/s);
  await page.screenshot({ path: `${SHOTS}/estate.png`, fullPage: true });
  // A box links the flow's run for that date.
  await Promise.all([page.waitForURL(`${SERVE}/runs/${clean}`), page.click('svg#estate-map #n-estate-clean')]);
  // The date picker shows another date: nothing ran there.
  await page.goto(`${SERVE}/estate?date=${day}`);
  await page.fill('form.estate-date input[name=date]', '2026-12-05');
  await Promise.all([page.waitForURL(/date=2026-12-05/), page.click('form.estate-date button[type=submit]')]);
  assert.equal(await page.locator('svg#estate-map #n-estate-clean').getAttribute('data-state'), 'none');

  await page.goto(`${SERVE}/estate?date=${day}&lang=zh-CN`);
  assert.match(await page.textContent('nav.main-nav'), /全景/);
  assert.match(await page.textContent('h1'), /业务日期全景/);
  assert.match(await page.textContent('svg#estate-map #n-estate-clean'), /等待 estate-pull/);
  assert.match(await page.textContent('ul.estate-roots'), /失败，阻塞了/);
  await page.screenshot({ path: `${SHOTS}/estate-zh-CN.png`, fullPage: true });
  await ctx.close();

  const phone = await context({ viewport: PHONE, isMobile: true, hasTouch: true, deviceScaleFactor: 2 });
  const small = await signIn(phone, T.viewer);
  for (const [lang, waits] of [['en', /waits for estate-pull/], ['zh-CN', /等待 estate-pull/]]) {
    await small.goto(`${SERVE}/estate?date=${day}&lang=${lang}`);
    await noHorizontalScroll(small);
    assert.equal(await small.locator('svg#estate-map').isVisible(), false, 'the wide drawing is hidden on a phone');
    const box = small.locator('svg#v-estate-map #v-n-estate-clean');
    assert.ok(await box.isVisible(), 'the top-to-bottom drawing is shown');
    assert.match(await box.textContent(), waits);
    const scale = await small.evaluate(() => {
      const svg = document.getElementById('v-estate-map');
      return svg.getBoundingClientRect().width / svg.viewBox.baseVal.width;
    });
    assert.ok(scale >= 0.55, `the phone's map is drawn at ${scale.toFixed(2)} of its size`);
    await small.screenshot({ path: `${SHOTS}/estate-phone${lang === 'en' ? '' : '-zh-CN'}.png` });
  }
  await phone.close();
});

test('backfill from the console: pick a range on the flow page, see its progress grow live, cancel it (en desktop, zh-CN phone)', async () => {
  const cases = [
    { lang: 'en', from: '2026-11-02', to: '2026-11-13', shot: 'backfills',
      opts: { viewport: { width: 1400, height: 900 } },
      words: { nav: 'Backfills', open: 'Backfill', cancel: 'Cancel backfill', running: 'running', cancelled: 'cancelled' } },
    { lang: 'zh-CN', from: '2026-10-05', to: '2026-10-16', shot: 'backfills-phone-zh-CN',
      opts: { viewport: PHONE, isMobile: true, hasTouch: true, deviceScaleFactor: 2, locale: 'zh-CN' },
      words: { nav: '补数', open: '补数', cancel: '取消补数', running: '运行中', cancelled: '已取消' } },
  ];
  for (const c of cases) {
    const ctx = await context(c.opts);
    const page = await signIn(ctx, T.operator);
    await page.goto(`${SERVE}/flows/backfill-load?lang=${c.lang}`);
    if (c.opts.isMobile) await noHorizontalScroll(page);
    // The top navigation links the backfills page.
    assert.equal(await page.locator('nav.main-nav a[href="/backfills"]').textContent(), c.words.nav);
    await page.click('details.backfill-form > summary');
    const form = page.locator('details.backfill-form form');
    assert.match(await page.textContent('details.backfill-form > summary'), new RegExp(c.words.open));
    await form.locator('input[name=from]').fill(c.from);
    await form.locator('input[name=to]').fill(c.to);
    await form.locator('input[name=parallel]').fill('2');
    await form.locator('textarea[name=reason]').fill(`browser test ${c.lang}`);
    await Promise.all([page.waitForURL(/\/backfills$/, { timeout: DEADLINE_MS }), form.locator('button[type=submit]').click()]);
    const mine = (await api(SERVE, 'GET', '/backfills', null, T.operator)).backfills
      .find((b) => b.flow === 'backfill-load' && b.date_from === c.from);
    assert.ok(mine, `the backfill of ${c.from} is in the API`);
    assert.equal(mine.actor, 'ops-alice', 'started as the signed-in token');
    assert.equal(mine.dates.length, 12);
    await page.evaluate(() => { window.__sameDocument = true; });
    const row = page.locator(`tr[data-backfill="${mine.id}"]`);
    assert.equal(await row.getAttribute('data-state'), 'running');
    assert.match(await row.locator(`span[class*="bf-"]`).textContent(), new RegExp(c.words.running));
    // Its progress grows on the open page (the live stream refreshes it).
    const settled = async () => Number((await row.locator('span.counts').textContent()).split('/')[0]);
    await until('two dates done on the page', async () => (await settled()) >= 2);
    assert.equal(await page.evaluate(() => window.__sameDocument), true, 'the page was not reloaded');
    assert.match(await row.locator('span.counts').textContent(), /\/12$/);
    const bar = await row.locator('progress').evaluate((p) => [p.value, p.max]);
    assert.ok(bar[0] >= 2 && bar[1] === 12, `the bar reads ${bar}`);
    if (c.opts.isMobile) await noHorizontalScroll(page);
    await page.screenshot({ path: `${SHOTS}/${c.shot}.png`, fullPage: !c.opts.isMobile });
    // Cancel it with a reason: its state turns cancelled, nothing of it runs on.
    const cancel = row.locator('button[data-open]', { hasText: c.words.cancel });
    if (c.opts.isMobile) {
      // On a phone each backfill is a card: its cancel button is in view, not off to the side.
      const b = await cancel.boundingBox();
      assert.ok(b && b.x >= 0 && b.x + b.width <= PHONE.width, `cancel button in view: ${JSON.stringify(b)}`);
    }
    await cancel.click();
    const dialog = page.locator(`dialog[id="dlg-cancel-${mine.id}"]`);
    await dialog.waitFor({ state: 'visible' });
    const box = await dialog.boundingBox();
    const view = page.viewportSize();
    assert.ok(box.x >= 0 && box.x + box.width <= view.width, `dialog in view: ${JSON.stringify(box)}`);
    await dialog.locator('textarea[name=reason]').fill('seen enough');
    await dialog.locator('button[type=submit]').click();
    await page.waitForSelector('#flash .flash.ok', { timeout: DEADLINE_MS });
    await page.waitForSelector(`tr[data-backfill="${mine.id}"][data-state="cancelled"]`, { timeout: DEADLINE_MS });
    assert.match(await page.locator(`tr[data-backfill="${mine.id}"] span[class*="bf-"]`).textContent(), new RegExp(c.words.cancelled));
    const shown = await api(SERVE, 'GET', `/backfills/${mine.id}`, null, T.operator);
    assert.equal(shown.state, 'cancelled');
    assert.ok(shown.progress.success >= 2 && shown.progress.success < 12, `some dates ran, not all: ${JSON.stringify(shown.progress)}`);
    await until('no run of the backfill left running', async () => {
      const now = await api(SERVE, 'GET', `/backfills/${mine.id}`, null, T.operator);
      return now.steps.every((s) => !['QUEUED', 'RUNNING'].includes(s.run_state));
    });
    await ctx.close();
  }
});

test('dark mode follows prefers-color-scheme', async () => {
  const ctx = await context({ colorScheme: 'dark', viewport: { width: 1400, height: 900 } });
  const page = await ctx.newPage();
  const runs = await api(DEV, 'GET', '/runs?flow=daily-settlement&limit=1');
  await page.goto(`${DEV}/runs/${runs.runs[0].run_id}`);
  const bg = await page.evaluate(() => getComputedStyle(document.body).backgroundColor);
  assert.equal(bg, 'rgb(18, 22, 28)');
  await page.screenshot({ path: `${SHOTS}/run-dark.png`, fullPage: true });
  await page.goto(`${DEV}/`);
  await page.screenshot({ path: `${SHOTS}/overview-dark.png`, fullPage: true });
  await ctx.close();
});
