"""The stream engine: consume, dispatch, acknowledge, retry, dead-letter, recover."""
