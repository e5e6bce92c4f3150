"""An app whose two functions hold until the test releases them.

A queue function and an hourly timer function each record that they started, then wait on
``release``: a test sees what the host counts as work in flight while they run.
"""

import threading

import azure.functions as func

app = func.FunctionApp()

release = threading.Event()
started: list[str] = []

HOLD_SECONDS = 15


@app.service_bus_queue_trigger(arg_name="msg", queue_name="%HELD_QUEUE%", connection="SB")
def held_message(msg: func.ServiceBusMessage) -> None:
    started.append(msg.get_body().decode())
    release.wait(HOLD_SECONDS)


@app.timer_trigger(schedule="0 0 * * * *", arg_name="timer")
def held_tick(timer: func.TimerRequest) -> None:
    started.append("tick")
    release.wait(HOLD_SECONDS)
