"""Matrix (`type: matrix`): a matrix-nio client on `/sync` long polling, no end-to-end
encryption.

`create(config, context)` is the factory the channel registry calls; the registry imports this
module only for profiles that use Matrix.
"""

from __future__ import annotations

from channels.matrix.channel import MatrixChannel, MatrixTimeouts
from channels.matrix.receiver import ENCRYPTED_NOTICE
from channels.registry import channel_factory

__all__ = ["ENCRYPTED_NOTICE", "MatrixChannel", "MatrixTimeouts", "create"]


create = channel_factory(MatrixChannel)
