"""RocketMQ-format store files, pure: record codec, mapped files, consume queues, index files,
checkpoint and config JSON.  Writer, dispatcher, flusher, readers and Spark all import this;
nobody else parses these bytes."""
