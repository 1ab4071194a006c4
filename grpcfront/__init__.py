"""The gRPC front: RocketMQ 5.x's clients (``apache.rocketmq.v2.MessagingService``) over the same store and roles."""

PROTOCOL = "rocketmq-python-client==5.1.2"      # the wheel whose descriptors are the protocol (grpcfront/v2.py)
