"""Consumers of the token stream: the streaming transformer language-model leaf."""
