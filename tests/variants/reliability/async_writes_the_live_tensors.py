"""The async checkpointer hands the live tensors to its writing thread without a snapshot: it
returns at once, but the steps that follow change the tensors before they are written."""
# target: checkpoint.py

import threading


class AsyncCheckpointer:
    def __init__(self):
        self._thread, self._args, self._records = None, None, None

    def save(self, state, path, group=None):
        self.wait()
        rank, _ = rank_and_size(group)
        self._args = (path, group)
        self._thread = threading.Thread(target=self._write, args=(state, path, rank))
        self._thread.start()

    def _write(self, state, path, rank):
        self._records = write_shard(state, path, rank)

    def wait(self):
        if self._thread is not None:
            self._thread.join()
            self._thread = None
            commit(self._records, *self._args)
