"""Clients that trickle, for end-to-end tests of the HTTP servers under attack.

Each client sends a request head and then one byte a second; one whose head is
empty sends nothing at all. A client the server answers or closes connects
again on its next tick, as an attacker would. One thread drives them all.
"""

import socket
import threading


class Tricklers:
    """*count* clients of 127.0.0.1:*port*, the *heads* shared out among them in turn."""

    def __init__(self, port, heads, count, interval=1.0):
        self.port, self.heads, self.interval = port, heads, interval
        self.clients = [None] * count
        self.connections = 0       # connections made, the first ones included
        self.ended_by_server = 0   # answered, closed or reset by the server
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, name="tricklers", daemon=True)

    def __enter__(self):
        for index in range(len(self.clients)):
            self._connect(index)
        self.thread.start()
        return self

    def __exit__(self, *_exc):
        self.stopping.set()
        self.thread.join(10)
        for client in self.clients:
            if client is not None:
                client.close()

    def _run(self):
        while not self.stopping.wait(self.interval):
            for index, client in enumerate(self.clients):
                if client is not None and self._alive(client, self.heads[index % len(self.heads)]):
                    continue
                if client is not None:
                    client.close()
                    self.ended_by_server += 1
                self._connect(index)

    def _connect(self, index):
        head = self.heads[index % len(self.heads)]
        try:
            client = socket.create_connection(("127.0.0.1", self.port), timeout=5)
            client.sendall(head)
            client.setblocking(False)
        except OSError:
            client = None
        else:
            self.connections += 1
        self.clients[index] = client

    @staticmethod
    def _alive(client, head):
        """Whether the server has neither answered nor closed *client*; if so, its next byte."""
        try:
            client.recv(65536)
            return False   # an answer, or the end of the stream
        except BlockingIOError:
            pass
        except OSError:
            return False
        if head:
            try:
                client.send(b"x")
            except OSError:
                return False
        return True
