"""What every API family's routes share: the service behind a request and the chat prompt
(`common`), errors as HTTP answers (`errors`), access rules (`security`), cancellation when a
client goes away (`disconnect`), and NDJSON and SSE streams (`streams`)."""
