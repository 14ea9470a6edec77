"""Helpers of the hot-reload end-to-end tests, shared with the hostile-template ones:
publish an event for a function, remove the images of the functions a test made."""

import json

import docker.errors


def publish(client, name, number):
    return client.xadd("events", {"event": json.dumps({"kind": name, "n": number})}).decode()


def remove_images(docker_engine, token):
    for image in docker_engine.api.images(name="relay-fn-*"):
        for tag in image.get("RepoTags") or ():
            if f"-{token}:" in tag:
                try:
                    docker_engine.api.remove_image(tag)
                except docker.errors.APIError:
                    pass
