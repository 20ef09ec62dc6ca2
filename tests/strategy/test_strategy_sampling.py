"""Distributed samplers inserted for every replica (known bugs 7, 8, 11) and the device loader."""

import math
import warnings

import pytest
import torch
from torch.utils.data import BatchSampler, DataLoader, DistributedSampler, SequentialSampler
from torch_xla.distributed.parallel_loader import MpDeviceLoader

from fixtures.data import Streamed, indexed_data
from strategy import XLAStrategy
from strategy.sampling import ReplicaShard, set_epoch, with_distributed_sampler


def _indices(loader) -> list[int]:
    return [int(i) for (batch,) in loader for i in batch.reshape(-1).tolist()]


@pytest.mark.parametrize("shuffle", [False, True])
def test_inserted_sampler_uses_global_rank_world_size_shuffle_and_seed(shuffle):
    loader = DataLoader(indexed_data(40), batch_size=4, shuffle=shuffle, drop_last=True)
    sharded = with_distributed_sampler(loader, num_replicas=8, rank=5, seed=123)

    sampler = sharded.sampler
    assert isinstance(sampler, DistributedSampler)
    assert (sampler.num_replicas, sampler.rank, sampler.shuffle, sampler.seed) == (
        8,
        5,
        shuffle,
        123,
    )
    assert sharded.dataset is loader.dataset
    assert (sharded.batch_size, sharded.drop_last) == (4, True)
    assert with_distributed_sampler(sharded, num_replicas=8, rank=5) is sharded  # idempotent


def test_replicas_get_disjoint_shards_that_cover_the_dataset():
    loader = DataLoader(indexed_data(64), batch_size=4, shuffle=True)
    shards = [_indices(with_distributed_sampler(loader, 8, rank, seed=7)) for rank in range(8)]
    assert all(len(shard) == 8 for shard in shards)
    assert sorted(i for shard in shards for i in shard) == list(range(64))


def test_set_epoch_reshuffles_identically_on_every_rank():
    loader = DataLoader(indexed_data(64), batch_size=8, shuffle=True)
    replicas = [with_distributed_sampler(loader, 8, rank, seed=7) for rank in range(8)]
    by_epoch = []
    for epoch in (0, 1):
        for replica in replicas:
            set_epoch(MpDeviceLoader(replica, torch.device("xla:0")), epoch)
        by_epoch.append([_indices(replica) for replica in replicas])
    assert by_epoch[0] != by_epoch[1]
    for shards in by_epoch:
        assert sorted(i for shard in shards for i in shard) == list(range(64))


def test_the_users_own_distributed_sampler_is_left_alone():
    dataset = indexed_data(32)
    own = DistributedSampler(dataset, num_replicas=8, rank=2, shuffle=False)
    loader = DataLoader(dataset, batch_size=2, sampler=own)
    assert with_distributed_sampler(loader, num_replicas=8, rank=2) is loader
    with pytest.warns(UserWarning, match="num_replicas=8, rank=2, but this is global rank 3 of 8"):
        assert with_distributed_sampler(loader, num_replicas=8, rank=3) is loader


def test_iterable_datasets_are_split_item_by_item_into_equal_shards():
    loader = DataLoader(Streamed(indexed_data(27)), batch_size=2)
    shards = [_indices(with_distributed_sampler(loader, 8, rank)) for rank in range(8)]
    assert all(len(shard) == 3 for shard in shards)  # 27 items: 3 complete groups of 8
    assert sorted(i for shard in shards for i in shard) == list(range(24))
    sharded = with_distributed_sampler(loader, 8, 0)
    assert isinstance(sharded.dataset, ReplicaShard)
    assert with_distributed_sampler(sharded, 8, 0) is sharded


def test_evaluation_warns_that_padding_duplicates_samples_and_does_not_shuffle():
    loader = DataLoader(indexed_data(30), batch_size=4, shuffle=True)
    with pytest.warns(UserWarning, match="pads the shards with 2 repeated sample"):
        sharded = with_distributed_sampler(loader, 8, 0, evaluation=True)
    assert sharded.sampler.shuffle is False
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with_distributed_sampler(DataLoader(indexed_data(32)), 8, 0, evaluation=True)


def test_loaders_that_cannot_be_rebuilt_are_refused_with_the_way_out():
    class Batches(BatchSampler):
        pass

    dataset = indexed_data(16)
    custom = DataLoader(dataset, batch_sampler=[[0, 1], [2, 3]])
    with pytest.raises(
        TypeError, match=r"custom batch_sampler list.*use_distributed_sampler=False"
    ):
        with_distributed_sampler(custom, 8, 0)

    class MyLoader(DataLoader):
        pass

    with pytest.raises(TypeError, match=r"MyLoader.*use_distributed_sampler=False"):
        with_distributed_sampler(MyLoader(dataset), 8, 0)
    with pytest.raises(ValueError, match="rank 8 is not a replica of a world of 8"):
        with_distributed_sampler(DataLoader(dataset), 8, 8)
    with pytest.raises(TypeError, match="custom batch_sampler Batches"):
        with_distributed_sampler(
            DataLoader(dataset, batch_sampler=Batches(SequentialSampler(dataset), 2, False)), 8, 0
        )


def test_a_plain_batch_sampler_keeps_its_batch_size_and_drop_last():
    dataset = indexed_data(40)
    loader = DataLoader(dataset, batch_sampler=BatchSampler(SequentialSampler(dataset), 3, True))
    sharded = with_distributed_sampler(loader, 8, 1)
    assert isinstance(sharded.sampler, DistributedSampler)
    assert (sharded.batch_size, sharded.drop_last) == (3, True)
    assert _indices(sharded) == [1, 9, 17]  # 5 samples, one full batch of 3


@pytest.mark.xla
def test_process_dataloader_wraps_once_and_keeps_dataset_and_batch_sampler(xla_rank):
    strategy = XLAStrategy()
    strategy.setup_environment()
    loader = with_distributed_sampler(
        DataLoader(indexed_data(64), batch_size=4), **strategy.distributed_sampler_kwargs
    )

    wrapped = strategy.process_dataloader(loader)

    assert isinstance(wrapped, MpDeviceLoader)
    assert strategy.process_dataloader(wrapped) is wrapped
    assert wrapped.dataset is loader.dataset
    assert wrapped.batch_sampler is loader.batch_sampler
    # 64 samples over n replicas, padded to a multiple of n, in batches of 4
    n = xla_rank.world_size
    padded = list(range(64)) + list(range(64))[: -64 % n]
    assert len(wrapped) == math.ceil(len(padded) // n / 4)
    batches = [batch for (batch,) in wrapped]
    assert all(batch.device == xla_rank.device for batch in batches)
    mine = sorted(int(i) for batch in batches for i in batch.cpu().tolist())
    assert mine == sorted(padded[xla_rank.rank :: n])  # this rank's shard, by global rank
