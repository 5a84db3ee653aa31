// Madeira console — shared page behaviour (ES module, no build step).
// Dialogs, relative times, table filters, and the live stream: one EventSource
// per page on /events, resumed by the browser with Last-Event-ID; after three
// errors in a row the page falls back to polling every 5 s.

const POLL_MS = 5000;
/** How often relative times (`5 s ago`) are written again. */
const TICK_MS = 5000;

function setStatus(kind) {
  const el = document.getElementById('live-status');
  if (!el) return;
  el.dataset.kind = kind;
  el.textContent = el.dataset[kind] || '';
}

/** Opens the page's live stream. `h.onEvent(transition)`, `h.onReset()`. */
function live(url, h) {
  let errors = 0;
  let poll = null;
  const es = new EventSource(url);
  es.addEventListener('open', () => { errors = 0; setStatus('ok'); });
  es.addEventListener('transition', (m) => {
    try { h.onEvent({ ...JSON.parse(m.data), id: Number(m.lastEventId) }); } catch (e) { console.error('madeira: bad event', e); }
  });
  es.addEventListener('reset', () => h.onReset());
  es.addEventListener('error', () => {
    errors += 1;
    setStatus('retry');
    if (errors >= 3 && !poll) {
      es.close();
      setStatus('poll');
      poll = setInterval(() => h.onReset(), POLL_MS);
    }
  });
  return es;
}

/** Something the user is doing that a refresh must not destroy. */
function busy() {
  if (document.querySelector('dialog[open], details[open].run-now')) return true;
  if (document.querySelector('input[type=checkbox][name="sel"]:checked')) return true;
  const a = document.activeElement;
  return !!(a && a.closest && a.closest('form') && a.matches('input, textarea, select'));
}

function debounce(fn, ms) {
  let t = null;
  return () => { clearTimeout(t); t = setTimeout(fn, ms); };
}

/** Runs `fn` once, `ms` after the first call since it last ran: calls meanwhile
 * join that run. Unlike `debounce`, a steady stream of calls (runs ending every
 * second) still runs it every `ms`, so a live list keeps up during activity. */
function coalesce(fn, ms) {
  let t = null;
  return () => { if (t === null) t = setTimeout(() => { t = null; fn(); }, ms); };
}

/** Re-reads #main of the current URL (list pages' live update). */
function refreshMain() {
  if (busy() || !window.htmx) return;
  window.htmx.ajax('GET', location.pathname + location.search, { target: '#main', select: '#main', swap: 'outerHTML' });
}

// The server's clock minus this browser's, read from the page (`data-now`, the
// server's time as it rendered it): relative times count from the server's clock,
// as the ones it rendered do, whatever this machine's clock says.
const SKEW_MS = (() => {
  const now = Number(document.body.dataset.now);
  return Number.isFinite(now) && now > 0 ? now - Date.now() : 0;
})();

function relative(ms, lang) {
  const d = Date.now() + SKEW_MS - ms;
  const s = Math.round(Math.abs(d) / 1000);
  const zh = lang === 'zh-CN';
  let text;
  if (s < 60) text = zh ? `${s} 秒` : `${s} s`;
  else if (s < 3600) text = zh ? `${Math.floor(s / 60)} 分钟` : `${Math.floor(s / 60)} min`;
  else if (s < 86400) text = zh ? `${Math.floor(s / 3600)} 小时 ${Math.floor((s % 3600) / 60)} 分钟` : `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`;
  else text = zh ? `${Math.floor(s / 86400)} 天` : `${Math.floor(s / 86400)} d`;
  if (zh) return d >= 0 ? `${text}前` : `${text}后`;
  return d >= 0 ? `${text} ago` : `in ${text}`;
}

const TIME_KEY = 'madeira.time';
function timeMode() {
  try { return localStorage.getItem(TIME_KEY) || 'relative'; } catch (e) { return 'relative'; }
}

/** `ms` as `2026-12-01 17:30:00 Asia/Shanghai` (UTC when `tz` is unknown). */
function absolute(ms, tz) {
  let parts;
  try {
    parts = new Intl.DateTimeFormat('en-CA', {
      timeZone: tz, year: 'numeric', month: '2-digit', day: '2-digit',
      hour: '2-digit', minute: '2-digit', second: '2-digit', hourCycle: 'h23',
    }).formatToParts(new Date(ms));
  } catch (e) {
    return tz === 'UTC' ? new Date(ms).toISOString() : absolute(ms, 'UTC');
  }
  const get = (type) => (parts.find((p) => p.type === type) || {}).value;
  return `${get('year')}-${get('month')}-${get('day')} ${get('hour')}:${get('minute')}:${get('second')} ${tz}`;
}

function tickTimes() {
  const lang = document.body.dataset.lang;
  const mode = timeMode();
  for (const el of document.querySelectorAll('time[datetime]')) {
    const ms = Date.parse(el.getAttribute('datetime'));
    if (Number.isNaN(ms)) continue;
    if (mode === 'utc') el.textContent = absolute(ms, 'UTC');
    else if (mode === 'flow') {
      const holder = el.closest('[data-tz]');
      el.textContent = absolute(ms, holder ? holder.dataset.tz : 'UTC');
    } else el.textContent = relative(ms, lang);
  }
}

const timeSelect = document.getElementById('time-mode');
if (timeSelect) {
  timeSelect.value = timeMode();
  timeSelect.addEventListener('change', () => {
    try { localStorage.setItem(TIME_KEY, timeSelect.value); } catch (e) { /* private mode: this page only */ }
    tickTimes();
  });
}
// Relative times keep counting while the page stays open (a finished run's page
// is never re-rendered), and every swapped-in fragment is shown in the chosen mode.
document.body.addEventListener('htmx:afterSettle', () => tickTimes());
tickTimes();
setInterval(tickTimes, TICK_MS);

document.addEventListener('click', (ev) => {
  const open = ev.target.closest('[data-open]');
  if (open) {
    const dlg = document.getElementById(open.dataset.open);
    if (dlg && dlg.showModal) { dlg.showModal(); const f = dlg.querySelector('textarea'); if (f) f.focus(); }
    return;
  }
  const close = ev.target.closest('[data-close]');
  if (close) {
    const dlg = document.getElementById(close.dataset.close);
    if (dlg) dlg.close();
  }
});

document.addEventListener('input', (ev) => {
  const input = ev.target.closest('input[data-filter]');
  if (!input) return;
  const q = input.value.trim().toLowerCase();
  for (const row of document.querySelectorAll(`${input.dataset.filter} tbody tr`)) {
    row.hidden = q !== '' && !(row.dataset.node || row.textContent).toLowerCase().includes(q);
  }
});

// Row selection for bulk forms: a "select all" box and a live count.
function countSelected(name) {
  const n = document.querySelectorAll(`input[type=checkbox][name="${name}"]:checked`).length;
  for (const el of document.querySelectorAll(`.sel-count[data-for="${name}"]`)) el.textContent = String(n);
}
document.addEventListener('change', (ev) => {
  const all = ev.target.closest('input[data-select-all]');
  const name = all ? all.dataset.selectAll : ev.target.name;
  if (all) {
    for (const box of document.querySelectorAll(`input[type=checkbox][name="${name}"]`)) box.checked = all.checked;
  }
  if (name) countSelected(name);
});

// A successful htmx action closes its dialog; the server's HX-Trigger asks for a refresh.
document.body.addEventListener('htmx:afterRequest', (ev) => {
  const dlg = ev.target.closest && ev.target.closest('dialog');
  if (dlg && ev.detail.successful) { dlg.close(); ev.target.reset && ev.target.reset(); }
  // A bulk form that succeeded lets go of its selection (so the refresh may run).
  if (!dlg && ev.detail.successful && ev.target.matches && ev.target.matches('form.bulk')) {
    ev.target.reset();
    for (const all of document.querySelectorAll('input[data-select-all]')) all.checked = false;
    countSelected('sel');
  }
});

const main = document.getElementById('main');
const mode = main ? main.dataset.live : '';
if (mode === 'runs' || mode === 'manual') {
  const flow = main.dataset.liveFlow;
  const params = new URLSearchParams();
  if (flow) params.set('flow', flow);
  if (main.dataset.after) params.set('after', main.dataset.after);
  const url = `/events?${params}`;
  const later = coalesce(refreshMain, mode === 'manual' ? 300 : 1500);
  live(url, {
    onEvent: (e) => {
      const manual = e.to === 'MANUAL_CONFIRM' || e.from === 'MANUAL_CONFIRM';
      if (mode === 'manual' ? manual : e.node === null) later();
    },
    onReset: refreshMain,
  });
  document.body.addEventListener('madeira-refresh', () => setTimeout(refreshMain, 50));
}

window.Madeira = { live, busy, debounce, coalesce, setStatus };
