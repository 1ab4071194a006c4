"""``stop_tasks`` ends a loop whose cancellation Python 3.11's ``wait_for`` swallowed: the reply
it waited for and the cancel landed in the same loop turn (what hung a consumer's shutdown)."""
import asyncio
import sys

from rocketbox.client.instance import stop_tasks


async def cancel_and_gather(tasks):
    """How shutdown stopped its tasks before: one cancel each, then wait."""
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


def stops_a_puller_whose_reply_lands_with_the_cancel(stop) -> bool:
    async def main():
        loop = asyncio.get_running_loop()
        replies: list[asyncio.Future] = []

        async def puller():                      # the shape of PushConsumer._pull_loop
            while True:
                replies.append(loop.create_future())
                await asyncio.wait_for(replies[-1], 10)

        task = loop.create_task(puller())
        await asyncio.sleep(0)
        replies[-1].set_result("reply")          # the reply and the cancel in one loop turn
        try:
            await asyncio.wait_for(stop([task]), 3)
        except asyncio.TimeoutError:
            task.cancel()                        # let asyncio.run end
            return False
        return task.cancelled()

    return asyncio.run(main())


def test_stop_tasks_ends_a_loop_that_swallowed_its_cancellation():
    assert stops_a_puller_whose_reply_lands_with_the_cancel(stop_tasks)


def test_one_cancel_is_not_enough_before_python_3_12():
    """The reason for ``stop_tasks``: with one cancel the puller runs on (3.11; fixed in 3.12)."""
    assert stops_a_puller_whose_reply_lands_with_the_cancel(cancel_and_gather) == (sys.version_info >= (3, 12))
