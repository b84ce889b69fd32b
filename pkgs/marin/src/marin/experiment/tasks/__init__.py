"""Generated tasks and data over the bundled stories: benchmark tasks with known answers
(:mod:`~marin.experiment.tasks.story`) and chats for fine-tuning (:mod:`~marin.experiment.tasks.story_chat`).
"""
