"""Matrix (`type: matrix`): a matrix-nio client on `/sync` long polling, no end-to-end
encryption.

`create(config, context)` is the factory the channel registry calls; the registry imports this
module only for profiles that use Matrix.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from channels.matrix.channel import MatrixChannel
from channels.matrix.receiver import ENCRYPTED_NOTICE

if TYPE_CHECKING:
    from channels.registry import ChannelContext
    from config import MatrixConfig

__all__ = ["ENCRYPTED_NOTICE", "MatrixChannel", "create"]


def create(config: MatrixConfig, context: ChannelContext) -> MatrixChannel:
    return MatrixChannel(config, data_dir=context.data_dir)
