"""Fixtures shared by the API tests: a client application and a worker, each with its own user."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from rest_framework.test import APIClient

from tests.helpers import CLIENT_PERMISSIONS, client_for, make_user


@pytest.fixture
def client_user(db) -> User:
    """A client application's user: may view, submit and cancel tasks."""
    return make_user("client", *CLIENT_PERMISSIONS)


@pytest.fixture
def api(client_user: User) -> APIClient:
    """An API client signed in as `client_user`."""
    return client_for(client_user)


@pytest.fixture
def worker_user(db) -> User:
    """An HTTP worker's user: may lease and report on tasks."""
    return make_user("worker", "work_task")
