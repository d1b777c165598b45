"""The private part of the store, ``<store>/private/``: everything derived from true records that the pipeline
keeps, and nothing here is ever published. :class:`PrivateStore` composes its rooms, each a module:

- :mod:`artifacts.private_folder`: the folder itself (modes, atomic 0600 writes, the MAC key ``store.key``);
- :mod:`artifacts.draws`: the secret draws that protect individuals and the measurements kept with them; what
  leaves is the public commitment to a draw;
- :mod:`artifacts.ledger`: each population's privacy-budget ledger (the privacy contract, the hash chain and
  its tamper evidence, the cap rules); what leaves is the ledger's head, which published manifests record;
- :mod:`artifacts.tables`: table ownership: the secret table as the privacy door sealed it, its path behind a
  flow run's public handle, each population's keyed sketch of its people.

The scan of the published runs whose manifests commit to ledger heads is the store's side:
:mod:`artifacts.published`.

Layout under ``<store>/private/`` (folders 0700, files 0600, owner only, no symlinks; checked and
repaired every time a :class:`PrivateStore` is opened):

  store.key                                  32 random bytes (``secrets``): the ledger's MAC key
  draws/<commitment>/draw.json               a draw (:mod:`artifacts.draws`)
  draws/<commitment>/<name>.json             a measurement kept with the draw
  populations/<pop>/versions/<version>/<n>   the commitment of the version's n-th draw
  populations/<pop>/ledger/<seq:08d>.json    the ledger entries (:mod:`artifacts.ledger`)
  populations/<pop>/void-<time>-<hex>/       a ledger that failed verification, moved aside
  tables/<HMAC(key, pop)>.json               the population's keyed sketch of its people (:mod:`artifacts.tables`)
  sealed/<sha256>.parquet                    the secret table as the privacy door read it
  paths/<tag>.json                           the secret table's path behind a flow run's ``private-path:<tag>``
  failures/<record>.txt                      which people a failed run's secret-table error is about
"""

from __future__ import annotations

from artifacts.draws import Draws
from artifacts.ledger import Budget, Ledger
from artifacts.published import published_heads
from artifacts.tables import Tables


class PrivateStore(Draws, Ledger, Tables):
    """``<store>/private/``: its draws (:class:`artifacts.draws.Draws`), the populations' ledgers
    (:class:`artifacts.ledger.Ledger`) and table ownership (:class:`artifacts.tables.Tables`), over one folder,
    one key and one permission check (:class:`artifacts.private_folder.PrivateFolder`)."""

    def rename(self, old: str, new: str, by: str, why: str) -> Budget:
        """``mdp-release ledger rename OLD NEW``: the population ``old`` becomes ``new``, recorded in both chains
        (:meth:`artifacts.ledger.Ledger.rename_ledger`: the budget continues whole under ``new``; ``old`` then
        refuses every new charge, naming ``new``), then its table versions and draws
        (:meth:`artifacts.draws.Draws.move_draws`) and its keyed sketch (:meth:`artifacts.tables.Tables.move_sketch`)
        move to ``new``, so ``new``'s next table is a version of its own and not "another population's". The
        decision is recorded first; re-running the command after an interruption completes the moves. Returns
        ``new``'s budget. LedgerError, nothing moved, when ``old``'s ledger lacks a head its published releases
        committed to (a rolled-back budget is not carried to a name without published heads)."""
        self.check_published(old, published_heads(self.store_root, old))
        budget = self.rename_ledger(old, new, by, why)
        self.move_draws(old, new)
        self.move_sketch(old, new)
        return budget


__all__ = ["PrivateStore"]
