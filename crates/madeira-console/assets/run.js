// Madeira console — the run page (ES module). Live node states on the SVG
// (class st-<STATE> on g#n-<node>; the SVG itself is never re-rendered), the
// node side panel, the log viewer (byte-offset tail), and the refetch of
// #run-live: debounced on events, at once when the run reaches a final state.

const ICONS = { SUCCESS: '✓', FAILED: '✗', RUNNING: '▶', RETRYING: '↻', SKIPPED: '⤼', MANUAL_CONFIRM: '‖', CANCELLED: '⊘', QUEUED: '…' };
const TERMINAL = ['SUCCESS', 'FAILED', 'CANCELLED'];
const page = document.querySelector('.run-page[data-run]');

/** A node's boxes: in the graph drawn across (`n-`) and its phone copy drawn down (`v-n-`). */
function nodeBoxes(node) {
  return [document.getElementById(`n-${node}`), document.getElementById(`v-n-${node}`)].filter(Boolean);
}
const M = window.Madeira;

function setClass(el, state) {
  const keep = [...el.classList].filter((c) => !c.startsWith('st-'));
  el.setAttribute('class', [...keep, `st-${state}`].join(' '));
}

// Each state's badge text in the page's language (`terms::state_labels_json`).
const LABELS = JSON.parse(document.body.dataset.stateLabels || '{}');

/** A state badge as `page::badge` draws it: text in the page's language, SPEC name in data-state. */
function badge(state) {
  const span = document.createElement('span');
  span.className = `badge st-${state}`;
  span.dataset.state = state;
  const shown = LABELS[state] || state;
  if (shown !== state) span.title = state;
  const icon = document.createElement('span');
  icon.className = 'icon';
  icon.setAttribute('aria-hidden', 'true');
  icon.textContent = ICONS[state] || '○';
  span.append(icon, ` ${shown}`);
  return span;
}

// Per node, the id of the event its shown state comes from: an older answer
// (a refetch that left before a newer event arrived) never overwrites it.
const seen = new Map();

/** Shows `state` on node `node` (as of event `id`): box class, icon, state text, table cell. */
function setNodeState(node, state, id) {
  if (id !== undefined) {
    if ((seen.get(node) || 0) > id) return;
    seen.set(node, id);
  }
  for (const g of nodeBoxes(node)) {
    setClass(g, state);
    const icon = g.querySelector('.icon');
    if (icon) icon.textContent = ICONS[state] || '○';
    const text = g.querySelector('.state');
    // As `dag::node_svg` writes it: the SPEC name, and in Chinese its gloss.
    const gloss = LABELS[state] && LABELS[state] !== state ? ` · ${LABELS[state]}` : '';
    if (text && !text.textContent.startsWith(state)) text.textContent = `${state}${gloss}`;
    g.setAttribute('aria-label', `${node}: ${state}`);
  }
  const cell = document.querySelector(`#r-${node} .state-cell`);
  if (cell && !cell.querySelector(`.st-${state}`)) cell.replaceChildren(badge(state));
}

/** Applies the states #run-live carries (rendered as of event data-event). */
function applyIsland() {
  const live = document.getElementById('run-live');
  if (!live || !live.dataset.states) return;
  const at = Number(live.dataset.event) || 0;
  for (const [node, state] of Object.entries(JSON.parse(live.dataset.states))) setNodeState(node, state, at);
  if (page) page.dataset.terminal = String(TERMINAL.includes(live.dataset.state));
}

function refreshLive() {
  if (!page || !window.htmx) return;
  if (M.busy()) { pending = true; return; }
  // The same table search as the page (`?q=`), if any.
  const q = new URLSearchParams(location.search).get('q');
  const query = q ? `?q=${encodeURIComponent(q)}` : '';
  window.htmx.ajax('GET', `/runs/${page.dataset.run}/live${query}`, { target: '#run-live', swap: 'outerHTML' });
}

function panelNode() {
  const body = document.querySelector('#panel .panel-body');
  return body ? body.dataset.node : null;
}

function openPanel(node, push) {
  if (!page || !window.htmx) return;
  window.htmx.ajax('GET', `/runs/${page.dataset.run}/nodes/${node}`, { target: '#panel', swap: 'innerHTML' });
  if (push) history.replaceState(null, '', `/runs/${page.dataset.run}?node=${node}`);
  for (const g of document.querySelectorAll('.dag .node.selected')) g.classList.remove('selected');
  for (const g of nodeBoxes(node)) g.classList.add('selected');
}

let pending = false;
document.addEventListener('close', () => { if (pending) { pending = false; refreshLive(); } }, true);

// ---- log viewer ----------------------------------------------------------
const log = { run: null, node: null, attempt: null, offset: 0, text: '', timer: null, inflight: null, es: null, gen: 0 };

function renderLog() {
  const box = document.querySelector('#panel .logs');
  if (!box) return;
  const pre = box.querySelector('pre.log');
  const q = (box.querySelector('.log-search') || {}).value || '';
  const lines = log.text.split('\n');
  const shown = q ? lines.filter((l) => l.toLowerCase().includes(q.toLowerCase())) : lines;
  // An attempt still running may print later; a finished one printed nothing.
  const running = box.dataset.running !== undefined && Number(box.dataset.running) === Number(log.attempt);
  pre.textContent = log.text === '' ? (running ? box.dataset.empty : box.dataset.emptyDone) : shown.join('\n');
  if (!q) pre.scrollTop = pre.scrollHeight;
}

/** Reads the bytes past the offset once (one read at a time; a read started for
 * another node or attempt is dropped when it answers). */
function pollLog() {
  if (!log.node || log.es) return Promise.resolve();
  if (log.inflight) return log.inflight;
  const gen = log.gen;
  const url = `/runs/${log.run}/nodes/${log.node}/log?attempt=${log.attempt}&offset=${log.offset}`;
  log.inflight = (async () => {
    const res = await fetch(url, { credentials: 'same-origin' });
    if (!res.ok || gen !== log.gen) return;
    const chunk = await res.text();
    if (gen !== log.gen) return;
    const next = Number(res.headers.get('X-Log-Offset'));
    if (next < log.offset) { log.text = ''; } // the log was replaced: start over
    log.text += chunk;
    log.offset = Number.isFinite(next) ? next : log.offset + chunk.length;
    renderLog();
  })().catch(() => {}).finally(() => { log.inflight = null; });
  return log.inflight;
}

/** Appends what the follow stream pushes; ends with a last read of the tail. */
function followLog() {
  const es = new EventSource(`/runs/${log.run}/nodes/${log.node}/log/follow?attempt=${log.attempt}&offset=${log.offset}`);
  log.es = es;
  let errors = 0;
  es.addEventListener('open', () => { errors = 0; });
  es.addEventListener('log', (m) => {
    if (log.es !== es) return;
    try {
      const d = JSON.parse(m.data);
      log.text += d.text;
      log.offset = Number(m.lastEventId);
      renderLog();
    } catch (e) { console.error('madeira: bad log event', e); }
  });
  const stop = () => { es.close(); if (log.es === es) log.es = null; };
  es.addEventListener('end', () => { stop(); pollLog(); });
  es.addEventListener('error', () => {
    // The browser reconnects by itself with Last-Event-ID; after three errors in
    // a row the viewer asks every second instead.
    errors += 1;
    if (errors >= 3 && log.es === es) {
      stop();
      log.timer = setInterval(pollLog, 1000);
    }
  });
}

async function startLog() {
  clearInterval(log.timer);
  if (log.es) { log.es.close(); log.es = null; }
  const box = document.querySelector('#panel .logs');
  if (!box) { log.node = null; return; }
  const tab = box.querySelector('.tab[aria-selected="true"]') || box.querySelector('.tab');
  if (log.inflight) await log.inflight; // a read for the previous view answers first
  const gen = log.gen + 1;
  Object.assign(log, { run: box.dataset.run, node: box.dataset.node, attempt: tab ? tab.dataset.attempt : 1, offset: 0, text: '', gen });
  const dl = box.querySelector('.log-download');
  if (dl) dl.href = `/runs/${log.run}/nodes/${log.node}/log?attempt=${log.attempt}&download=1`;
  await pollLog();
  // While the attempt runs, the server pushes the bytes past the offset.
  if (gen === log.gen && !log.es && box.isConnected && box.dataset.running === String(log.attempt)) followLog();
}

document.addEventListener('click', (ev) => {
  const tab = ev.target.closest('#panel .logs .tab');
  if (tab) {
    for (const t of tab.parentElement.querySelectorAll('.tab')) t.setAttribute('aria-selected', String(t === tab));
    startLog();
    return;
  }
  const node = ev.target.closest('.dag .node[data-node], a.node-link[data-node]');
  // A node outside a large run's focused view: follow the link (the page refocuses).
  if (node && page && nodeBoxes(node.dataset.node).length) {
    ev.preventDefault();
    openPanel(node.dataset.node, true);
  }
});
document.addEventListener('keydown', (ev) => {
  const node = ev.target.closest && ev.target.closest('.dag .node[data-node]');
  if (node && page && (ev.key === 'Enter' || ev.key === ' ')) { ev.preventDefault(); openPanel(node.dataset.node, true); }
});
document.addEventListener('input', (ev) => { if (ev.target.closest('#panel .log-search')) renderLog(); });

document.body.addEventListener('htmx:afterSwap', (ev) => {
  const id = ev.detail.target && ev.detail.target.id;
  if (id === 'panel') startLog();
});
// htmx swaps #run-live by outerHTML: the new element replaces the target.
document.body.addEventListener('htmx:afterSettle', (ev) => {
  const elt = ev.detail.elt || ev.target;
  if (elt && (elt.id === 'run-live' || elt.id === 'main' || elt.closest?.('#run-live'))) applyIsland();
});
document.body.addEventListener('madeira-refresh', () => setTimeout(() => {
  refreshLive();
  const n = panelNode();
  if (n) openPanel(n, false);
}, 50));

if (page) {
  applyIsland();
  startLog();
  const selected = panelNode();
  if (selected) for (const g of nodeBoxes(selected)) g.classList.add('selected');
  const rows = document.querySelectorAll('#nodes-table tbody tr').length;
  const later = M.debounce(refreshLive, rows > 300 ? 3000 : 700);
  const refreshPanel = M.debounce(() => { const n = panelNode(); if (n && !M.busy()) openPanel(n, false); }, 400);
  const after = document.getElementById('main').dataset.after;
  M.live(`/events?run=${encodeURIComponent(page.dataset.run)}${after ? `&after=${after}` : ''}`, {
    onEvent: (e) => {
      if (e.node) {
        setNodeState(e.node, e.to, e.id);
        if (e.node === panelNode()) { refreshPanel(); pollLog(); }
        later();
      } else {
        const state = document.getElementById('run-state');
        if (state) state.replaceChildren(badge(e.to));
        // The final fetch: the run ended, read everything once more now.
        if (TERMINAL.includes(e.to)) refreshLive(); else later();
      }
    },
    onReset: () => { refreshLive(); refreshPanel(); },
  });
}
