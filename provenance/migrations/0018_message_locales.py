from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('provenance', '0017_graph_debts'),
    ]

    operations = [
        migrations.AddField(
            model_name='workspace',
            name='message_locale',
            field=models.CharField(blank=True, help_text="How money is written in this workspace's customer messages (e.g. en_US, de_DE); empty: the deployment's KINTSUGI_MESSAGE_LOCALE. A ticket's own locale wins. Set on the message template page.", max_length=16, verbose_name='customer message locale'),
        ),
        migrations.AddField(
            model_name='ticket',
            name='locale',
            field=models.CharField(blank=True, help_text="The customer's locale (e.g. de_DE): how money is written in their messages; empty: the workspace's.", max_length=16),
        ),
    ]
