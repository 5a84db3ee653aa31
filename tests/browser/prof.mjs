import { chromium } from 'playwright-core';
const BASE = 'http://127.0.0.1:38170';
const run = process.argv[2];
const browser = await chromium.launch({ executablePath: '/usr/bin/chromium', headless: true, args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'] });
for (const js of [true, false]) {
  const ctx = await browser.newContext({ javaScriptEnabled: js, viewport: { width: 1400, height: 900 } });
  const page = await ctx.newPage();
  for (const path of ['/sidecars', `/runs/${run}`, `/runs/${run}?focus=all`]) {
    const xs = [];
    for (let i = 0; i < 3; i++) {
      await page.goto(BASE + path, { waitUntil: 'load' });
      xs.push(await page.evaluate(() => { const n = performance.getEntriesByType('navigation')[0]; return [Math.round(n.responseEnd), Math.round(n.domInteractive), Math.round(n.domContentLoadedEventEnd), Math.round(n.loadEventEnd)]; }));
    }
    console.log(js ? 'js ' : 'nojs', path.slice(0, 30), JSON.stringify(xs.slice(1)));
  }
  await ctx.close();
}
await browser.close();
