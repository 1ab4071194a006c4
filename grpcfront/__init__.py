"""The gRPC front: RocketMQ 5.x's clients (``apache.rocketmq.v2.MessagingService``) over the same store and roles."""
