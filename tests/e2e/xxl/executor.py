"""A pyxxl executor for Madeira's XXL-JOB e2e tests (tests/e2e/xxl.rs).

Usage: executor.py ADMIN_URL APP TOKEN PORT NAME WIRE_LOG
Registers with ADMIN_URL (e.g. http://127.0.0.1:7070/xxl-job-admin/api/) as APP,
listening on 127.0.0.1:PORT; every protocol call in both directions is appended to
WIRE_LOG as one JSON line {dir, path, request, response}.
"""

import asyncio
import json
import os
import sys

from aiohttp import web
from pyxxl import ExecutorConfig, PyxxlRunner
from pyxxl.ctx import g
from pyxxl.xxl_client import XXL

admin, app_name, token, port, name, wire = sys.argv[1:7]


def record(direction, path, request, response):
    with open(wire, "a") as f:
        f.write(json.dumps({"dir": direction, "executor": name, "path": path,
                            "request": request, "response": response}) + "\n")


_post = XXL._post


async def logged_post(self, path, payload, retry_times=None):
    try:
        r = await _post(self, path, payload, retry_times)
        record("executor->admin", path, payload, {"code": r.code, "msg": r.msg})
        return r
    except Exception as e:
        record("executor->admin", path, payload, {"error": str(e)})
        raise


XXL._post = logged_post


@web.middleware
async def wire_log(request, handler):
    body = await request.text()
    response = await handler(request)
    try:
        req = json.loads(body) if body else None
    except ValueError:
        req = body
    text = getattr(response, "text", None)
    try:
        resp = json.loads(text) if text else None
    except ValueError:
        resp = text
    record("admin->executor", request.path, req, resp)
    return response


config = ExecutorConfig(
    xxl_admin_baseurl=admin,
    executor_app_name=app_name,
    access_token=token,
    executor_listen_host="127.0.0.1",
    executor_listen_port=int(port),
    executor_url=f"http://127.0.0.1:{port}",
    executor_log_path=os.path.join(os.path.dirname(wire), f"{name}.executor.log"),
    log_local_dir=os.path.join(os.path.dirname(wire), f"{name}-logs"),
    dotenv_try=False,
    debug=True,
)
runner = PyxxlRunner(config)


@runner.register(name="hello")
async def hello():
    g.logger.info("hello from %s: params=%s", name, g.xxl_run_data.executorParams)
    for i in range(3):
        g.logger.info("hello step %d", i)
        await asyncio.sleep(0.2)
    return f"hello done on {name}"


@runner.register(name="flaky")
async def flaky():
    marker = g.xxl_run_data.executorParams
    if not os.path.exists(marker):
        open(marker, "w").close()
        g.logger.info("flaky: first try fails")
        raise RuntimeError("flaky: first try fails")
    g.logger.info("flaky: second try succeeds")
    return "flaky ok"


@runner.register(name="forever")
async def forever():
    g.logger.info("forever: started on %s", name)
    while True:
        await asyncio.sleep(0.1)


@runner.register(name="slow")
async def slow():
    g.logger.info("slow: started on %s", name)
    with open(os.path.join(os.path.dirname(wire), f"{name}.started"), "w") as f:
        f.write(str(g.xxl_run_data.logId))
    await asyncio.sleep(float(g.xxl_run_data.executorParams or "5"))
    return f"slow done on {name}"


@runner.register(name="shard")
async def shard():
    d = g.xxl_run_data
    g.logger.info("shard %s/%s on %s", d.broadcastIndex, d.broadcastTotal, name)
    return f"shard {d.broadcastIndex}/{d.broadcastTotal} on {name}"


app = runner.create_server_app()
app.middlewares.append(wire_log)
web.run_app(app, host="127.0.0.1", port=int(port), print=lambda *_: print(f"executor {name} on {port}", flush=True))
