"""${message}"""

import sqlalchemy as sa
from alembic import op

from harness.store.migrations.steps import (
    add_columns,
    column_revision,
    create_index,
    create_table,
    drop_columns,
)
${imports if imports else ""}
revision = "${up_revision}"
down_revision = ${"\"%s\"" % down_revision if down_revision else "None"}
% if branch_labels:
branch_labels = ${repr(branch_labels)}
% endif
% if depends_on:
depends_on = ${repr(depends_on)}
% endif


def upgrade() -> None:
    ${upgrades if upgrades else "pass"}


def downgrade() -> None:
    ${downgrades if downgrades else "pass"}
