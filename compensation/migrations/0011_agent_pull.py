from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('compensation', '0010_review_desk'),
    ]

    operations = [
        migrations.AlterField(
            model_name='delivery',
            name='state',
            field=models.CharField(choices=[('queued', 'queued'), ('retrying', 'retrying after a temporary failure'), ('sending', 'sending'), ('delivered', 'delivered'), ('accepted', 'accepted by the mail server'), ('submitted', 'submitted'), ('pending', 'pending at the provider'), ('succeeded', 'succeeded'), ('failed', 'failed'), ('canceled', 'canceled'), ('dead', 'gave up after its last try'), ('uncertain', 'uncertain: the worker stopped while the provider answered'), ('awaiting_ack', 'awaiting acknowledgement')], default='queued', max_length=16),
        ),
        migrations.AlterField(
            model_name='deliveryattempt',
            name='outcome',
            field=models.CharField(choices=[('queued', 'queued'), ('retrying', 'retrying after a temporary failure'), ('sending', 'sending'), ('delivered', 'delivered'), ('accepted', 'accepted by the mail server'), ('submitted', 'submitted'), ('pending', 'pending at the provider'), ('succeeded', 'succeeded'), ('failed', 'failed'), ('canceled', 'canceled'), ('dead', 'gave up after its last try'), ('uncertain', 'uncertain: the worker stopped while the provider answered'), ('awaiting_ack', 'awaiting acknowledgement')], max_length=16),
        ),
    ]
